package amqp

import (
	"encoding/json"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/keelmq/keel/internal/amqp/wire"
	"github.com/keelmq/keel/internal/store/record"
	"github.com/keelmq/keel/internal/vfs"
)

// exchangesFile holds the durable exchanges and their bindings.
const exchangesFile = "exchanges.json"

// Exchange types served.
const (
	kindDirect = "direct"
	kindFanout = "fanout"
	kindTopic  = "topic"
)

// exchange is a named exchange (the default exchange is not one: it
// routes by queue name).
type exchange struct {
	name       string
	kind       string
	durable    bool
	autoDelete bool
	internal   bool
	predefined bool
	bindings   []binding
}

type binding struct {
	Queue string `json:"queue"`
	Key   string `json:"key"`
}

type exchangeDef struct {
	Name       string    `json:"name"`
	Kind       string    `json:"type"`
	AutoDelete bool      `json:"autoDelete,omitempty"`
	Internal   bool      `json:"internal,omitempty"`
	Bindings   []binding `json:"bindings,omitempty"`
}

// predefined are the exchanges every vhost has.
var predefined = map[string]string{"amq.direct": kindDirect, "amq.fanout": kindFanout, "amq.topic": kindTopic}

func (v *vhost) openExchanges() error {
	v.exchanges = map[string]*exchange{}
	for name, kind := range predefined {
		v.exchanges[name] = &exchange{name: name, kind: kind, durable: true, predefined: true}
	}
	var defs []exchangeDef
	if err := readJSON(v.srv.cfg.FS, filepath.Join(v.srv.dir, exchangesFile), &defs); err != nil {
		return err
	}
	for _, d := range defs {
		e := v.exchanges[d.Name]
		if e == nil {
			e = &exchange{name: d.Name, kind: d.Kind, durable: true, autoDelete: d.AutoDelete, internal: d.Internal}
			v.exchanges[d.Name] = e
		}
		for _, b := range d.Bindings {
			if q := v.queues[b.Queue]; q != nil && q.persistent() {
				e.bindings = append(e.bindings, b)
			}
		}
	}
	return nil
}

// saveExchangesLocked writes the durable exchanges with their bindings to
// persistent queues. v.mu is held.
func (v *vhost) saveExchangesLocked() error {
	defs := []exchangeDef{}
	for _, e := range v.exchanges {
		if !e.durable {
			continue
		}
		d := exchangeDef{Name: e.name, Kind: e.kind, AutoDelete: e.autoDelete, Internal: e.internal}
		for _, b := range e.bindings {
			if q := v.queues[b.Queue]; q != nil && q.persistent() {
				d.Bindings = append(d.Bindings, b)
			}
		}
		if e.predefined && len(d.Bindings) == 0 {
			continue
		}
		defs = append(defs, d)
	}
	sort.Slice(defs, func(i, j int) bool { return defs[i].Name < defs[j].Name })
	b, err := json.Marshal(defs)
	if err != nil {
		return err
	}
	v.saveMu.Lock()
	defer v.saveMu.Unlock()
	return vfs.WriteFileDurable(v.srv.cfg.FS, filepath.Join(v.srv.dir, exchangesFile), b, 0o644)
}

func (v *vhost) declareExchange(m *wire.ExchangeDeclare) error {
	if m.Exchange == "" {
		return soft(wire.AccessRefused, m, "operation not permitted on the default exchange")
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if e := v.exchanges[m.Exchange]; e != nil {
		if m.Passive {
			return nil
		}
		if e.kind != m.Type || e.durable != m.Durable || e.autoDelete != m.AutoDelete || e.internal != m.Internal {
			return soft(wire.PreconditionFailed, m, "inequivalent arg 'type', 'durable', 'auto_delete' or 'internal' for exchange '%s' in vhost '/'", m.Exchange)
		}
		return nil
	}
	if m.Passive {
		return soft(wire.NotFound, m, "no exchange '%s' in vhost '/'", m.Exchange)
	}
	if strings.HasPrefix(m.Exchange, "amq.") {
		return soft(wire.AccessRefused, m, "exchange name '%s' contains reserved prefix 'amq.*'", m.Exchange)
	}
	switch m.Type {
	case kindDirect, kindFanout, kindTopic:
	case "headers":
		return hard(wire.NotImplemented, m, "headers exchanges are not implemented yet")
	default:
		return hard(wire.CommandInvalid, m, "unknown exchange type '%s'", m.Type)
	}
	v.exchanges[m.Exchange] = &exchange{name: m.Exchange, kind: m.Type, durable: m.Durable, autoDelete: m.AutoDelete, internal: m.Internal}
	if m.Durable {
		if err := v.saveExchangesLocked(); err != nil {
			delete(v.exchanges, m.Exchange)
			return hard(wire.InternalError, m, "cannot write the exchange definitions: %v", err)
		}
	}
	return nil
}

func (v *vhost) deleteExchange(m *wire.ExchangeDelete) error {
	if m.Exchange == "" || predefined[m.Exchange] != "" {
		return soft(wire.AccessRefused, m, "operation not permitted on exchange '%s'", m.Exchange)
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	e := v.exchanges[m.Exchange]
	if e == nil {
		return nil // RabbitMQ answers delete-ok
	}
	if m.IfUnused && len(e.bindings) > 0 {
		return soft(wire.PreconditionFailed, m, "exchange '%s' in vhost '/' in use", m.Exchange)
	}
	delete(v.exchanges, m.Exchange)
	if e.durable {
		if err := v.saveExchangesLocked(); err != nil {
			return hard(wire.InternalError, m, "cannot write the exchange definitions: %v", err)
		}
	}
	return nil
}

// bind adds (or with unbind removes) a binding of queue to exchange.
func (v *vhost) bind(m wire.Method, c *conn, exch, queue, key string, unbind bool) error {
	if exch == "" {
		return soft(wire.AccessRefused, m, "operation not permitted on the default exchange")
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	e := v.exchanges[exch]
	if e == nil {
		return soft(wire.NotFound, m, "no exchange '%s' in vhost '/'", exch)
	}
	q := v.queues[queue]
	if q == nil {
		return soft(wire.NotFound, m, "no queue '%s' in vhost '/'", queue)
	}
	if q.owner != nil && q.owner != c {
		return soft(wire.ResourceLocked, m, "cannot obtain exclusive access to locked queue '%s' in vhost '/'", queue)
	}
	b := binding{Queue: queue, Key: key}
	i := slices.Index(e.bindings, b)
	switch {
	case unbind && i >= 0:
		e.bindings = slices.Delete(e.bindings, i, i+1)
	case !unbind && i < 0:
		if len(e.bindings) >= record.MaxDests {
			// A message is one record with one destination per queue.
			return soft(wire.PreconditionFailed, m, "exchange '%s' has the maximum of %d bindings", exch, record.MaxDests)
		}
		e.bindings = append(e.bindings, b)
	default:
		return nil
	}
	if e.durable && q.persistent() {
		if err := v.saveExchangesLocked(); err != nil {
			return hard(wire.InternalError, m, "cannot write the bindings: %v", err)
		}
	}
	return nil
}

// unbindQueueLocked drops every binding to queue (it was deleted). v.mu is held.
func (v *vhost) unbindQueueLocked(queue string) bool {
	changed := false
	for _, e := range v.exchanges {
		n := len(e.bindings)
		e.bindings = slices.DeleteFunc(e.bindings, func(b binding) bool { return b.Queue == queue })
		changed = changed || (len(e.bindings) != n && e.durable)
	}
	return changed
}

// route returns the queues a message published to exch with key goes to,
// each once, or an error for a missing or internal exchange.
func (v *vhost) route(m wire.Method, exch, key string) ([]*queue, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if exch == "" || exch == "amq.default" {
		if q := v.queues[key]; q != nil {
			return []*queue{q}, nil
		}
		return nil, nil
	}
	e := v.exchanges[exch]
	if e == nil {
		return nil, soft(wire.NotFound, m, "no exchange '%s' in vhost '/'", exch)
	}
	if e.internal {
		return nil, soft(wire.AccessRefused, m, "cannot publish to internal exchange '%s' in vhost '/'", exch)
	}
	var qs []*queue
	for _, b := range e.bindings {
		if !matches(e.kind, b.Key, key) {
			continue
		}
		if q := v.queues[b.Queue]; q != nil && !slices.Contains(qs, q) {
			qs = append(qs, q)
		}
	}
	return qs, nil
}

func matches(kind, pattern, key string) bool {
	switch kind {
	case kindFanout:
		return true
	case kindTopic:
		return topicMatch(matchWords(pattern), matchWords(key))
	}
	return pattern == key
}

// matchWords splits a routing key or pattern into words; "" has none.
func matchWords(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ".")
}

// topicMatch matches words: "*" is exactly one word, "#" zero or more.
func topicMatch(p, k []string) bool {
	for len(p) > 0 {
		switch p[0] {
		case "#":
			for i := 0; i <= len(k); i++ {
				if topicMatch(p[1:], k[i:]) {
					return true
				}
			}
			return false
		case "*":
			if len(k) == 0 {
				return false
			}
		default:
			if len(k) == 0 || k[0] != p[0] {
				return false
			}
		}
		p, k = p[1:], k[1:]
	}
	return len(k) == 0
}
