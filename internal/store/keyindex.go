package store

import (
	"slices"
	"sync"
)

// keyIndex is what the store needs from the IndexFile (package index).
type keyIndex interface {
	Put(key string, physOffset int64, storeTimestampMs int64) error
	Query(key string, max int, beginMs, endMs int64) ([]int64, error)
	MaxPhysOffset() int64
	Flush() error
	DeleteBeforePhys(minPhys int64) error
	TruncatePhys(physEnd int64) error
	Close() error
}

// memIndex is an in-memory keyIndex used until the on-disk index is wired
// in; it is rebuilt by re-dispatch at every start.
type memIndex struct {
	mu   sync.Mutex
	keys map[string][]memIndexEntry
	max  int64
}

type memIndexEntry struct{ phys, ts int64 }

func newMemIndex() *memIndex { return &memIndex{keys: map[string][]memIndexEntry{}, max: -1} }

func (m *memIndex) Put(key string, phys, ts int64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.keys[key] = append(m.keys[key], memIndexEntry{phys, ts})
	m.max = max(m.max, phys)
	return nil
}

func (m *memIndex) Query(key string, limit int, beginMs, endMs int64) ([]int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []int64
	es := m.keys[key]
	for i := len(es) - 1; i >= 0 && len(out) < limit; i-- {
		if e := es[i]; e.ts >= beginMs && e.ts <= endMs && !slices.Contains(out, e.phys) {
			out = append(out, e.phys)
		}
	}
	return out, nil
}

func (m *memIndex) MaxPhysOffset() int64 { m.mu.Lock(); defer m.mu.Unlock(); return m.max }
func (m *memIndex) Flush() error         { return nil }
func (m *memIndex) Close() error         { return nil }

func (m *memIndex) DeleteBeforePhys(minPhys int64) error {
	return m.filter(func(e memIndexEntry) bool { return e.phys >= minPhys })
}

func (m *memIndex) TruncatePhys(end int64) error {
	return m.filter(func(e memIndexEntry) bool { return e.phys < end })
}

func (m *memIndex) filter(keep func(memIndexEntry) bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for k, es := range m.keys {
		es = slices.DeleteFunc(es, func(e memIndexEntry) bool { return !keep(e) })
		if len(es) == 0 {
			delete(m.keys, k)
		} else {
			m.keys[k] = es
		}
	}
	return nil
}
