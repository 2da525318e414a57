package amqp

import (
	"encoding/json"
	"fmt"
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
	kindDirect  = "direct"
	kindFanout  = "fanout"
	kindTopic   = "topic"
	kindHeaders = "headers"
)

// maxRouteHops bounds how many exchanges one publish passes through over
// exchange-to-exchange bindings (a cycle is cut by the visited set; this
// bounds the work).
const maxRouteHops = 64

// exchange is a named exchange (the default exchange is not one: it
// routes by queue name).
type exchange struct {
	name       string
	kind       string
	durable    bool
	autoDelete bool
	internal   bool
	predefined bool
	alternate  string // alternate-exchange: where a message it routes nowhere goes ("": none)
	bindings   []binding
	hadBinding bool // auto-delete applies only after a first binding
}

// binding routes from an exchange to a queue (Queue) or, with an
// exchange-to-exchange binding, to another exchange (Exchange). Args are
// the bind's arguments (a headers exchange matches on them), encoded as a
// field table.
type binding struct {
	Queue    string `json:"queue,omitempty"`
	Exchange string `json:"exchange,omitempty"`
	Key      string `json:"key"`
	Args     []byte `json:"args,omitempty"`
	// Home is the broker group storing Queue when another group does
	// (forward_bind.go); "": the queue is here.
	Home string `json:"home,omitempty"`

	args wire.Table // Args decoded
}

func (b binding) same(o binding) bool {
	return b.Queue == o.Queue && b.Exchange == o.Exchange && b.Key == o.Key && string(b.Args) == string(o.Args)
}

func newBinding(queue, exch, key string, args wire.Table) binding {
	b := binding{Queue: queue, Exchange: exch, Key: key, args: args}
	if len(args) > 0 {
		var w wire.Writer
		w.Table(args)
		b.Args = w.Buf
	}
	return b
}

type exchangeDef struct {
	Name       string    `json:"name"`
	Kind       string    `json:"type"`
	AutoDelete bool      `json:"autoDelete,omitempty"`
	Internal   bool      `json:"internal,omitempty"`
	Alternate  string    `json:"alternateExchange,omitempty"`
	Bindings   []binding `json:"bindings,omitempty"`
}

// predefined are the exchanges every vhost has.
var predefined = map[string]string{"amq.direct": kindDirect, "amq.fanout": kindFanout, "amq.topic": kindTopic,
	"amq.headers": kindHeaders, "amq.match": kindHeaders}

func (v *vhost) openExchanges() error {
	v.exchanges = map[string]*exchange{}
	for name, kind := range predefined {
		v.exchanges[name] = &exchange{name: name, kind: kind, durable: true, predefined: true}
	}
	var defs []exchangeDef
	if err := readJSON(v.srv.cfg.FS, filepath.Join(v.dir, exchangesFile), &defs); err != nil {
		return err
	}
	for _, d := range defs {
		if v.exchanges[d.Name] == nil {
			v.exchanges[d.Name] = &exchange{name: d.Name, kind: d.Kind, durable: true, autoDelete: d.AutoDelete, internal: d.Internal,
				alternate: d.Alternate}
		}
	}
	for _, d := range defs {
		e := v.exchanges[d.Name]
		for _, b := range d.Bindings {
			r := wire.NewReader(b.Args)
			if len(b.Args) > 0 {
				b.args = r.Table()
			}
			if r.Err() != nil {
				return fmt.Errorf("amqp: %s: exchange %q: binding arguments: %w", exchangesFile, d.Name, r.Err())
			}
			if v.durableDest(b) {
				e.bindings = append(e.bindings, b)
				e.hadBinding = true
				v.remoteBound.Store(v.remoteBound.Load() || b.Home != "")
			}
		}
	}
	return nil
}

// durableDest reports whether a binding's destination survives a restart
// (a persistent queue or a durable exchange). v.mu is held.
func (v *vhost) durableDest(b binding) bool {
	if b.Exchange != "" {
		d := v.exchanges[b.Exchange]
		return d != nil && d.durable
	}
	if b.Home != "" {
		return true // its home keeps the queue (forward_bind.go)
	}
	q := v.queues[b.Queue]
	return q != nil && q.persistent()
}

// saveExchangesLocked writes the durable exchanges with their bindings to
// persistent queues. v.mu is held.
func (v *vhost) saveExchangesLocked() error {
	defs := v.exchangeDefsLocked()
	if err := v.logExchangeDefsLocked(defs); err != nil { // replicate.go
		return err
	}
	b, err := json.Marshal(defs)
	if err != nil {
		return err
	}
	v.saveMu.Lock()
	defer v.saveMu.Unlock()
	return vfs.WriteFileDurable(v.srv.cfg.FS, filepath.Join(v.dir, exchangesFile), b, 0o644)
}

// exchangeDefsLocked are the durable exchanges as exchanges.json holds
// them. v.mu is held.
func (v *vhost) exchangeDefsLocked() []exchangeDef {
	defs := []exchangeDef{}
	for _, e := range v.exchanges {
		if !e.durable {
			continue
		}
		d := exchangeDef{Name: e.name, Kind: e.kind, AutoDelete: e.autoDelete, Internal: e.internal, Alternate: e.alternate}
		for _, b := range e.bindings {
			if v.durableDest(b) {
				d.Bindings = append(d.Bindings, b)
			}
		}
		if e.predefined && len(d.Bindings) == 0 {
			continue
		}
		defs = append(defs, d)
	}
	sort.Slice(defs, func(i, j int) bool { return defs[i].Name < defs[j].Name })
	return defs
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
			return soft(wire.PreconditionFailed, m, "inequivalent arg 'type', 'durable', 'auto_delete' or 'internal' for exchange '%s' in vhost '%s'", m.Exchange, v.name)
		}
		if ae, _, _ := stringArg(m.Arguments, "alternate-exchange"); ae != e.alternate {
			return soft(wire.PreconditionFailed, m, "inequivalent arg 'alternate-exchange' for exchange '%s' in vhost '%s': received '%s' but current is '%s'", m.Exchange, v.name, ae, e.alternate)
		}
		return nil
	}
	if m.Passive {
		return soft(wire.NotFound, m, "no exchange '%s' in vhost '%s'", m.Exchange, v.name)
	}
	if strings.HasPrefix(m.Exchange, "amq.") {
		return soft(wire.AccessRefused, m, "exchange name '%s' contains reserved prefix 'amq.*'", m.Exchange)
	}
	switch m.Type {
	case kindDirect, kindFanout, kindTopic, kindHeaders:
	default:
		return hard(wire.CommandInvalid, m, "unknown exchange type '%s'", m.Type)
	}
	ae, _, err := stringArg(m.Arguments, "alternate-exchange")
	if err != nil {
		return soft(wire.PreconditionFailed, m, "%v for exchange '%s' in vhost '%s'", err, m.Exchange, v.name)
	}
	v.exchanges[m.Exchange] = &exchange{name: m.Exchange, kind: m.Type, durable: m.Durable, autoDelete: m.AutoDelete,
		internal: m.Internal, alternate: ae}
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
		return soft(wire.PreconditionFailed, m, "exchange '%s' in vhost '%s' in use", m.Exchange, v.name)
	}
	delete(v.exchanges, m.Exchange)
	v.unbindDestLocked(binding{Exchange: m.Exchange})
	if err := v.saveExchangesLocked(); err != nil {
		return hard(wire.InternalError, m, "cannot write the exchange definitions: %v", err)
	}
	return nil
}

// unbindDestLocked drops every binding to the destination (queue or
// exchange) of to, and then the auto-delete exchanges left without a
// binding. v.mu is held. It reports whether a durable exchange changed.
func (v *vhost) unbindDestLocked(to binding) bool {
	changed := false
	for _, e := range v.exchanges {
		n := len(e.bindings)
		e.bindings = slices.DeleteFunc(e.bindings, func(b binding) bool {
			return b.Queue == to.Queue && b.Exchange == to.Exchange
		})
		changed = changed || (len(e.bindings) != n && e.durable)
	}
	return v.autoDeleteLocked() || changed
}

// autoDeleteLocked deletes the auto-delete exchanges whose last binding
// went (and what that unbinds in turn). v.mu is held.
func (v *vhost) autoDeleteLocked() bool {
	changed := false
	for {
		var gone *exchange
		for _, e := range v.exchanges {
			if e.autoDelete && e.hadBinding && len(e.bindings) == 0 && !e.predefined {
				gone = e
				break
			}
		}
		if gone == nil {
			return changed
		}
		delete(v.exchanges, gone.name)
		changed = changed || gone.durable
		for _, e := range v.exchanges {
			n := len(e.bindings)
			e.bindings = slices.DeleteFunc(e.bindings, func(b binding) bool { return b.Exchange == gone.name })
			changed = changed || (len(e.bindings) != n && e.durable)
		}
	}
}

// bind adds (or with unbind removes) a binding from exchange exch to
// queue (or, with toExchange, to the exchange named queue).
func (v *vhost) bind(m wire.Method, c *conn, exch, queue, key string, args wire.Table, toExchange, unbind bool) error {
	if exch == "" || (toExchange && queue == "") {
		return soft(wire.AccessRefused, m, "operation not permitted on the default exchange")
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	e := v.exchanges[exch]
	if e == nil {
		return soft(wire.NotFound, m, "no exchange '%s' in vhost '%s'", exch, v.name)
	}
	b := newBinding(queue, "", key, args)
	durable := false
	if toExchange {
		d := v.exchanges[queue]
		if d == nil {
			return soft(wire.NotFound, m, "no exchange '%s' in vhost '%s'", queue, v.name)
		}
		b = newBinding("", queue, key, args)
		durable = d.durable
	} else {
		q := v.queues[queue]
		if q == nil {
			return soft(wire.NotFound, m, "no queue '%s' in vhost '%s'", queue, v.name)
		}
		if q.owner != nil && q.owner != c {
			return soft(wire.ResourceLocked, m, "cannot obtain exclusive access to locked queue '%s' in vhost '%s'", queue, v.name)
		}
		durable = q.persistent()
	}
	if e.kind == kindHeaders {
		if xm, ok := args["x-match"]; ok {
			switch tableString(xm) {
			case "all", "any", "all-with-x", "any-with-x":
			default:
				return soft(wire.PreconditionFailed, m, "invalid x-match field value %q; expected all, any, all-with-x, or any-with-x", tableString(xm))
			}
		}
	}
	i := slices.IndexFunc(e.bindings, b.same)
	switch {
	case unbind && i >= 0:
		e.bindings = slices.Delete(e.bindings, i, i+1)
		v.autoDeleteLocked()
	case !unbind && i < 0:
		if len(e.bindings) >= record.MaxDests {
			// A message is one record with one destination per queue.
			return soft(wire.PreconditionFailed, m, "exchange '%s' has the maximum of %d bindings", exch, record.MaxDests)
		}
		e.bindings = append(e.bindings, b)
		e.hadBinding = true
	default:
		return nil
	}
	if e.durable && durable || unbind {
		if err := v.saveExchangesLocked(); err != nil {
			return hard(wire.InternalError, m, "cannot write the bindings: %v", err)
		}
	}
	return nil
}

// unbindQueueLocked drops every binding to queue (it was deleted). v.mu is held.
func (v *vhost) unbindQueueLocked(queue string) bool {
	return v.unbindDestLocked(binding{Queue: queue})
}

// route returns the queues a message published to exch with key (and,
// for headers exchanges, the headers of props: raw content properties,
// nil when not known yet: then only the exchange is checked, and no queue
// returned) goes to, each once, or an error for a missing or internal
// exchange.
func (v *vhost) route(m wire.Method, exch, key string, props []byte) ([]*queue, error) {
	qs, _, err := v.routeAll(m, exch, key, props)
	return qs, err
}

// routeAll is route that also returns the names of the queues homed on
// other groups the message goes to (bindings made by forward_bind.go).
func (v *vhost) routeAll(m wire.Method, exch, key string, props []byte) ([]*queue, []string, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if exch == "" || exch == "amq.default" {
		if q := v.queues[key]; q != nil && props != nil {
			return []*queue{q}, nil, nil
		}
		return nil, nil, nil // routed nowhere, or the checks only (there are none)
	}
	e := v.exchanges[exch]
	if e == nil {
		return nil, nil, soft(wire.NotFound, m, "no exchange '%s' in vhost '%s'", exch, v.name)
	}
	if e.internal && m != nil {
		return nil, nil, soft(wire.AccessRefused, m, "cannot publish to internal exchange '%s' in vhost '%s'", exch, v.name)
	}
	if props == nil {
		return nil, nil, nil // the exchange's checks only
	}
	r := router{v: v, key: key, props: props, seen: map[string]bool{}}
	r.walk(e, 0)
	// Routed nowhere: the exchange's alternate exchange (and its own, in
	// turn) gets the message, as RabbitMQ does. An alternate that does
	// not exist routes nowhere.
	for hops := 0; len(r.qs) == 0 && len(r.remote) == 0 && e.alternate != "" && hops < maxRouteHops; hops++ {
		ae := v.exchanges[e.alternate]
		if ae == nil || r.seen[ae.name] {
			break
		}
		r.walk(ae, 0)
		e = ae
	}
	return r.qs, r.remote, nil
}

// router collects the queues of one route over exchange-to-exchange
// bindings.
type router struct {
	v       *vhost
	key     string
	props   []byte
	headers wire.Table
	decoded bool
	seen    map[string]bool
	qs      []*queue
	remote  []string // queues homed on other groups
}

func (r *router) walk(e *exchange, hops int) {
	if r.seen[e.name] || hops >= maxRouteHops {
		return
	}
	r.seen[e.name] = true
	for _, b := range e.bindings {
		if !r.matches(e.kind, b) {
			continue
		}
		if b.Exchange != "" {
			if d := r.v.exchanges[b.Exchange]; d != nil {
				r.walk(d, hops+1)
			}
			continue
		}
		if q := r.v.queues[b.Queue]; q != nil && !slices.Contains(r.qs, q) {
			r.qs = append(r.qs, q)
		} else if q == nil && b.Home != "" && !slices.Contains(r.remote, b.Queue) {
			r.remote = append(r.remote, b.Queue)
		}
	}
}

func (r *router) matches(kind string, b binding) bool {
	switch kind {
	case kindFanout:
		return true
	case kindTopic:
		return topicMatch(matchWords(b.Key), matchWords(r.key))
	case kindHeaders:
		if !r.decoded {
			r.decoded = true
			var p wire.BasicProperties
			if p.Read(wire.NewReader(r.props)) == nil {
				r.headers = p.Headers
			}
		}
		return headersMatch(b.args, r.headers)
	}
	return b.Key == r.key
}

// headersMatch is a headers exchange's test: x-match "all" (the default):
// every binding argument is a header of the message with an equal value;
// "any": at least one is. Arguments starting with "x-" take part only
// with "all-with-x" / "any-with-x". A void binding value matches any value.
func headersMatch(args, headers wire.Table) bool {
	mode := "all"
	if xm, ok := args["x-match"]; ok {
		mode = tableString(xm)
	}
	any, withX := strings.HasPrefix(mode, "any"), strings.HasSuffix(mode, "-with-x")
	n := 0
	for k, want := range args {
		if k == "x-match" || (!withX && strings.HasPrefix(k, "x-")) {
			continue
		}
		n++
		got, ok := headers[k]
		eq := ok && (want == nil || sameValue(want, got))
		if any && eq {
			return true
		}
		if !any && !eq {
			return false
		}
	}
	return !any
}

// sameValue compares two field-table values: strings with strings,
// numbers by value, anything else by its printed form.
func sameValue(a, b any) bool {
	na, aok := number(a)
	nb, bok := number(b)
	if aok || bok {
		return aok && bok && na == nb
	}
	return tableString(a) == tableString(b)
}

func number(v any) (float64, bool) {
	switch v := v.(type) {
	case int8:
		return float64(v), true
	case uint8:
		return float64(v), true
	case int16:
		return float64(v), true
	case uint16:
		return float64(v), true
	case int32:
		return float64(v), true
	case uint32:
		return float64(v), true
	case int64:
		return float64(v), true
	case int:
		return float64(v), true
	case float32:
		return float64(v), true
	case float64:
		return v, true
	}
	return 0, false
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
