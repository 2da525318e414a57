package amqp

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/keelmq/keel/internal/amqp/wire"
	"github.com/keelmq/keel/internal/vfs"
)

// Files under DataDir/amqp.
const (
	queuesFile = "queues.json"
	acksFile   = "acks.json"
)

// vhost is one virtual host: its queues and exchanges, with their
// definitions and acknowledgement state in dir.
type vhost struct {
	srv  *Server
	name string
	dir  string

	mu        sync.Mutex // guards queues and exchanges; taken before any queue's mu
	queues    map[string]*queue
	exchanges map[string]*exchange
	// remoteBound: some exchange has (or had) a binding to another
	// group's queue (forward_bind.go); until then a publish through an
	// exchange is not routed a second time for them.
	remoteBound atomic.Bool

	logged sysLogState // the definitions as last logged (replicate.go); guarded by mu

	saveMu sync.Mutex // serialises writes of the state files
	// ackMu makes saveAcks one at a time from snapshot to write: a later
	// snapshot written before an earlier one would leave acks.json behind
	// the queues (settled messages back after a restart) while their
	// dirty flags say it is current. Taken before v.mu, never under it.
	ackMu sync.Mutex
}

// queueDef is a durable queue as queues.json holds it.
type queueDef struct {
	Name  string `json:"name"`
	Topic string `json:"topic"`
	Args  []byte `json:"args,omitempty"` // the declare's arguments, encoded as a field table
}

// ackDef is one queue's acknowledgement state as acks.json holds it.
type ackDef struct {
	Floor     int64           `json:"floor"`
	Settled   []int64         `json:"settled,omitempty"`
	Delivered int64           `json:"delivered"`
	Returns   map[int64]int32 `json:"returns,omitempty"` // requeues of unsettled offsets (x-delivery-limit)
}

func openVhost(s *Server, name, dir string) (*vhost, error) {
	v := &vhost{srv: s, name: name, dir: dir, queues: map[string]*queue{}}
	if err := vfs.MkdirAllDurable(s.cfg.FS, dir, 0o755); err != nil {
		return nil, fmt.Errorf("amqp: vhost %q: %w", name, err)
	}
	var defs []queueDef
	if err := readJSON(s.cfg.FS, filepath.Join(dir, queuesFile), &defs); err != nil {
		return nil, err
	}
	acks := map[string]ackDef{}
	if err := readJSON(s.cfg.FS, filepath.Join(dir, acksFile), &acks); err != nil {
		return nil, err
	}
	for _, d := range defs {
		r := wire.NewReader(d.Args)
		args := r.Table()
		if r.Err() != nil {
			return nil, fmt.Errorf("amqp: %s: queue %q: arguments: %w", queuesFile, d.Name, r.Err())
		}
		a, err := parseQueueArgs(args)
		if err != nil {
			s.log.Error("amqp: a stored queue's arguments are not valid; they are not acted on", "queue", d.Name, "err", err)
			a, _ = parseQueueArgs(nil)
		}
		q := newQueue(v, d.Name, d.Topic, true, false, args, a, nil)
		lease, err := readLease(s.cfg.FS, q.leasePath())
		if err != nil {
			return nil, err
		}
		q.restore(acks[d.Topic], lease)
		v.queues[d.Name] = q
	}
	if err := v.openExchanges(); err != nil {
		return nil, err
	}
	return v, nil
}

func readJSON(fsys vfs.FS, path string, into any) error {
	f, err := fsys.OpenFile(path, os.O_RDONLY, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("amqp: %w", err)
	}
	defer f.Close()
	st, err := fsys.Stat(path)
	if err != nil {
		return fmt.Errorf("amqp: %w", err)
	}
	b := make([]byte, st.Size())
	if _, err := f.ReadAt(b, 0); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("amqp: read %s: %w", path, err)
	}
	if err := json.Unmarshal(b, into); err != nil {
		return fmt.Errorf("amqp: %s: %w", path, err)
	}
	return nil
}

// newTopic names the store topic of a new queue: a fresh random name, so
// that a queue deleted and declared again, or a transient queue of a
// previous run, never finds old messages (AMQP names are up to 255 bytes
// of any UTF-8; topics are short and file-name safe).
func newTopic() string {
	var b [12]byte
	rand.Read(b[:])
	return "%AMQP%" + hex.EncodeToString(b[:])
}

// saveDefsLocked writes queues.json. v.mu is held.
func (v *vhost) saveDefsLocked() error {
	defs := v.queueDefsLocked()
	if err := v.logQueueDefsLocked(defs); err != nil { // replicate.go
		return err
	}
	b, err := json.Marshal(defs)
	if err != nil {
		return err
	}
	v.saveMu.Lock()
	defer v.saveMu.Unlock()
	return vfs.WriteFileDurable(v.srv.cfg.FS, filepath.Join(v.dir, queuesFile), b, 0o644)
}

// saveAcks writes acks.json if any durable queue's state changed.
func (v *vhost) saveAcks() error {
	_, err := v.saveChangedAcks()
	return err
}

// saveChangedAcks is saveAcks; changed: some queue's state had changed.
func (v *vhost) saveChangedAcks() (changed bool, err error) {
	v.ackMu.Lock()
	defer v.ackMu.Unlock()
	v.mu.Lock()
	acks := map[string]ackDef{}
	qs := map[string]*queue{}
	var changedQs []*queue
	for _, q := range v.queues {
		if q.persistent() {
			d, changed := q.snapshot()
			acks[q.topic], qs[q.topic] = d, q
			if changed {
				changedQs = append(changedQs, q)
			}
		}
	}
	v.mu.Unlock()
	if len(changedQs) == 0 {
		return false, nil
	}
	b, err := json.Marshal(acks)
	if err != nil {
		return true, err
	}
	logErr := v.logAcks(acks, changedQs) // replicate.go: the record first
	v.saveMu.Lock()
	defer v.saveMu.Unlock()
	if err := vfs.WriteFileDurable(v.srv.cfg.FS, filepath.Join(v.dir, acksFile), b, 0o644); err != nil {
		// Not written: the snapshot cleared the queues' dirty flags, so
		// set them again for the next interval to retry.
		for _, q := range qs {
			q.mu.Lock()
			q.dirty = true
			q.mu.Unlock()
		}
		return true, err
	}
	for topic, d := range acks {
		qs[topic].savedFloor.Store(d.Floor)
	}
	return true, logErr
}

// declare implements queue.declare; it returns the queue.
func (v *vhost) declare(c *conn, m *wire.QueueDeclare) (*queue, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	name := m.Queue
	if name == "" {
		if m.Passive {
			return nil, soft(wire.NotFound, m, "no queue name given to a passive declare")
		}
		name = "amq.gen-" + newTopic()[6:]
	}
	if q, ok := v.queues[name]; ok {
		if q.owner != nil && q.owner != c {
			return nil, soft(wire.ResourceLocked, m, "cannot obtain exclusive access to locked queue '%s' in vhost '%s'", name, v.name)
		}
		if m.Passive {
			return q, nil
		}
		if q.durable != m.Durable || (q.owner != nil) != m.Exclusive || q.autoDelete != m.AutoDelete {
			return nil, soft(wire.PreconditionFailed, m, "inequivalent arg 'durable', 'exclusive' or 'auto_delete' for queue '%s' in vhost '%s': received durable=%v exclusive=%v auto_delete=%v but current is durable=%v exclusive=%v auto_delete=%v",
				name, v.name, m.Durable, m.Exclusive, m.AutoDelete, q.durable, q.owner != nil, q.autoDelete)
		}
		q.mu.Lock()
		q.lastUsed = nowMs() // a redeclare uses the queue (x-expires)
		q.mu.Unlock()
		if err := sameArgs(q.args, m.Arguments); err != "" {
			return nil, soft(wire.PreconditionFailed, m, "inequivalent arg '%s' for queue '%s' in vhost '%s'", err, name, v.name)
		}
		return q, nil
	}
	if m.Passive {
		return nil, soft(wire.NotFound, m, "no queue '%s' in vhost '%s'", name, v.name)
	}
	if len(name) > 255 {
		return nil, soft(wire.PreconditionFailed, m, "queue name too long")
	}
	a, err := parseQueueArgs(m.Arguments)
	if err != nil {
		return nil, soft(wire.PreconditionFailed, m, "%v for queue '%s' in vhost '%s'", err, name, v.name)
	}
	if t, _ := keelTopic(m.Arguments); t != "" && (a.maxBytes >= 0 || a.maxPriority > 0) {
		return nil, soft(wire.PreconditionFailed, m, "x-max-length-bytes and x-max-priority are not served on a queue over a Keel topic (queue '%s' in vhost '%s')", name, v.name)
	}
	if a.queueType == "quorum" && a.maxPriority > 0 {
		return nil, soft(wire.PreconditionFailed, m, "invalid arg 'x-max-priority' for queue '%s' in vhost '%s' of queue type quorum", name, v.name)
	}
	if a.queueType == "quorum" && (!m.Durable || m.Exclusive || m.AutoDelete) {
		return nil, soft(wire.PreconditionFailed, m, "invalid property 'non-durable', 'exclusive' or 'auto-delete' for quorum queue '%s' in vhost '%s'", name, v.name)
	}
	if a.queueType == "stream" {
		if err := streamDeclareCheck(m, name, v.name); err != nil { // stream.go
			return nil, err
		}
	}
	var owner *conn
	if m.Exclusive {
		owner = c
	}
	topic, err := v.queueTopic(m) // x-keel-topic (topicqueue.go)
	if err != nil {
		return nil, err
	}
	q := newQueue(v, name, topic, m.Durable, m.AutoDelete, m.Arguments, a, owner)
	v.queues[name] = q
	v.srv.wakeSweep()
	v.srv.trackTopic(q, true)
	if q.persistent() {
		if err := v.saveDefsLocked(); err != nil {
			delete(v.queues, name)
			return nil, hard(wire.InternalError, m, "cannot write the queue definition: %v", err)
		}
	}
	return q, nil
}

// sameArgs returns the first x- argument that differs, or "".
func sameArgs(a, b wire.Table) string {
	keys := map[string]bool{}
	for k := range a {
		keys[k] = true
	}
	for k := range b {
		keys[k] = true
	}
	for k := range keys {
		if fmt.Sprint(a[k]) != fmt.Sprint(b[k]) {
			return k
		}
	}
	return ""
}

// all returns every queue.
func (v *vhost) all() []*queue {
	v.mu.Lock()
	defer v.mu.Unlock()
	qs := make([]*queue, 0, len(v.queues))
	for _, q := range v.queues {
		qs = append(qs, q)
	}
	return qs
}

func (v *vhost) queue(name string) *queue {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.queues[name]
}

// remove deletes queue q (queue.delete, auto-delete, exclusive owner
// gone) and then its store topic (its ConsumeQueue; the records stay in
// the CommitLog until retention).
func (v *vhost) remove(q *queue) error {
	if err := v.removeDefs(q); err != nil {
		return err
	}
	if q.persistent() {
		q.leaseMu.Lock()
		q.leaseDone = true // an early raise under way writes no new file
		q.leaseFile.close()
		if err := v.srv.cfg.FS.Remove(q.leasePath()); err != nil && !errors.Is(err, fs.ErrNotExist) {
			v.srv.log.Error("amqp: remove the delivery lease of a deleted queue", "queue", q.name, "err", err)
		}
		q.leaseMu.Unlock()
	}
	v.srv.untrackTopic(q)
	if !q.ownsTopic() {
		return nil // a Keel topic the queue was declared over stays (topicqueue.go)
	}
	if err := v.srv.store.DeleteTopic(q.topic); err != nil {
		v.srv.log.Error("amqp: delete the store topic of a deleted queue", "queue", q.name, "topic", q.topic, "err", err)
	}
	return nil
}

func (v *vhost) removeDefs(q *queue) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.queues[q.name] != q {
		return nil
	}
	delete(v.queues, q.name)
	q.deleted()
	if v.unbindQueueLocked(q.name) && q.persistent() {
		if err := v.saveExchangesLocked(); err != nil {
			return err
		}
	}
	if q.persistent() {
		if err := v.saveDefsLocked(); err != nil {
			return err
		}
	}
	return nil
}

// connClosed deletes the exclusive queues of c.
func (v *vhost) connClosed(c *conn) {
	v.mu.Lock()
	var gone []*queue
	for _, q := range v.queues {
		if q.owner == c {
			gone = append(gone, q)
		}
	}
	v.mu.Unlock()
	for _, q := range gone {
		if err := v.remove(q); err != nil {
			v.srv.log.Error("amqp: delete exclusive queue", "queue", q.name, "err", err)
		}
	}
}

// trimLeases trims every queue's delivery lease (a clean shutdown).
func (v *vhost) trimLeases() {
	v.mu.Lock()
	qs := make([]*queue, 0, len(v.queues))
	for _, q := range v.queues {
		qs = append(qs, q)
	}
	v.mu.Unlock()
	for _, q := range qs {
		q.trimLease()
	}
}
