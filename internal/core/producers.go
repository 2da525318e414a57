package core

// The registry of online producers, for every front door: which client
// connections belong to which producer group, so that the broker can ask
// a producer of the group about an undecided transaction (a check-back
// goes to the connection seen most recently). An entry is keyed by its
// connection within the group; it leaves when the connection closes
// (RemoveConn), when the client unregisters, or after a timeout without
// a registration (Expire). Memory only.

import (
	"sync"
	"time"
)

type producerEntry struct {
	clientID string
	conn     any
	lastSeen time.Time
}

// Producers is the registry of online producers. Its methods are safe for
// concurrent use.
type Producers struct {
	now func() time.Time

	mu     sync.Mutex
	groups map[string]map[any]*producerEntry // group -> connection -> entry
}

func newProducers(now func() time.Time) *Producers {
	return &Producers{now: now, groups: make(map[string]map[any]*producerEntry)}
}

// Producers returns the core's registry of online producers.
func (b *Broker) Producers() *Producers { return b.producers }

// Register records (or renews) c as a producer of group.
func (m *Producers) Register(group string, c Client) {
	m.mu.Lock()
	defer m.mu.Unlock()
	g := m.groups[group]
	if g == nil {
		g = make(map[any]*producerEntry)
		m.groups[group] = g
	}
	g[c.Conn] = &producerEntry{clientID: c.ID, conn: c.Conn, lastSeen: m.now()}
}

func (m *Producers) removeWhere(drop func(group string, e *producerEntry) bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for name, g := range m.groups {
		for id, e := range g {
			if drop(name, e) {
				delete(g, id)
			}
		}
		if len(g) == 0 {
			delete(m.groups, name)
		}
	}
}

// RemoveConn drops every producer registered over conn.
func (m *Producers) RemoveConn(conn any) {
	m.removeWhere(func(_ string, e *producerEntry) bool { return e.conn == conn })
}

// Unregister drops client clientID from group.
func (m *Producers) Unregister(group, clientID string) {
	m.removeWhere(func(g string, e *producerEntry) bool { return g == group && e.clientID == clientID })
}

// Expire drops every producer not seen for timeout.
func (m *Producers) Expire(timeout time.Duration) {
	deadline := m.now().Add(-timeout)
	m.removeWhere(func(_ string, e *producerEntry) bool { return e.lastSeen.Before(deadline) })
}

// AnyConn returns the most recently seen connection of a producer group,
// or nil.
func (m *Producers) AnyConn(group string) any {
	m.mu.Lock()
	defer m.mu.Unlock()
	var best *producerEntry
	for _, e := range m.groups[group] {
		if best == nil || e.lastSeen.After(best.lastSeen) {
			best = e
		}
	}
	if best == nil {
		return nil
	}
	return best.conn
}

// Count returns the number of producer registrations (connection and
// group pairs).
func (m *Producers) Count() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, g := range m.groups {
		n += len(g)
	}
	return n
}
