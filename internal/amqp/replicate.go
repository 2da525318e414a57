package amqp

// The AMQP state that travels with the log (docs/replication.md, "What
// travels with the log").
//
// A master serving slaves (Config.SystemRecords) writes every change of
// its durable definitions and of its durable queues' acknowledgement
// state to its CommitLog as system records (package record: KindAMQPQueues,
// KindAMQPExchanges, KindAMQPAcks), before the file that holds it is
// written:
//
//   - Definitions: each write of queues.json or exchanges.json first logs
//     the entries that changed since the last one (set: the entry's JSON
//     as the file holds it; removed: no JSON) and waits until the record
//     is Flushed, under the vhost's lock, so the records of a vhost are in
//     the order of its file writes. Like the core's topic records they do
//     not wait for the slaves: a confirmed publish to the queue follows
//     the record in the log, so a slave that holds the message holds the
//     queue.
//   - Acknowledgement state: coalesced per AckStateInterval as acks.json
//     is, one record of the queues whose state changed (each queue's whole
//     state), which waits until it is Confirmed (replicated on a
//     SYNC_MASTER). Each change of a queue's delivery lease is a record of
//     its own, written under the queue's lock (so in the order of the
//     changes): a lease raised before deliveries is Confirmed before they
//     are handed out, so a new master flags every message the old one may
//     have delivered; the lease trimmed at a clean shutdown is logged too.
//
// Every member keeps the state from the records with a Mirror (the core's
// SystemTable for these kinds): at start it applies the records after its
// snapshot point (DataDir/amqp/logpoint.json) to the files and writes
// them before the AMQP door opens them; on a replica it applies each
// record as it is dispatched and writes the files at the core's offset
// flushes. Applying is idempotent: a definition entry is set or removed
// whole, acknowledgement states are merged (the highest floor and
// delivered mark, the union of settled offsets), and a lease is the last
// one logged, so a replay from an older point, or acknowledgement records
// of one queue out of order (a lease record between a snapshot and its
// record), end in the same state.

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/keelmq/keel/internal/amqp/wire"
	"github.com/keelmq/keel/internal/store"
	"github.com/keelmq/keel/internal/store/record"
	"github.com/keelmq/keel/internal/vfs"
)

// pointFile is the Mirror's snapshot point, under DataDir/amqp.
const pointFile = "logpoint.json"

// maxRecordEntryBytes bounds the entries of one record: a bigger change
// is several records (each entry stands on its own).
const maxRecordEntryBytes = 256 << 10

// rescanBytes: a point further behind the end of the start's replay is
// moved to it (and written), so that an idle AMQP state does not make
// every start read the log from an old point.
const rescanBytes = 64 << 20

// ackEntry is a queue's acknowledgement state as a KindAMQPAcks record
// carries it: acks.json's entry and, in a lease record, the delivery
// lease (lease-<topic>; 0: not a lease record).
type ackEntry struct {
	ackDef
	Lease int64 `json:"lease,omitempty"`
}

// sysLog appends the records of a master serving slaves.
type sysLog struct {
	st      *store.Store
	timeout time.Duration
}

func newSysLog(st *store.Store) *sysLog {
	t := st.ConfirmTimeout()
	if t <= 0 {
		t = 10 * time.Second
	}
	return &sysLog{st: st, timeout: t}
}

// errNotLogged: the record is not in the log (the change must not be
// acted on as replicated).
var errNotLogged = errors.New("amqp: change not written to the CommitLog")

// write appends the entries as records of kind (split by size) and waits
// until they reach mark. logged reports whether every record is in the
// log (then err is a wait that failed).
func (w *sysLog) write(kind record.Kind, vhost string, entries []record.ConfigEntry, mark store.Watermark) (logged bool, err error) {
	if len(entries) == 0 {
		return true, nil
	}
	end := int64(-1)
	for from := 0; from < len(entries); {
		to, size := from, 0
		for to < len(entries) && (to == from || size+len(entries[to].Name)+len(entries[to].Config) < maxRecordEntryBytes) {
			size += len(entries[to].Name) + len(entries[to].Config)
			to++
		}
		rec, err := record.AppendSystemRecord(nil, &record.SystemRecord{Kind: kind, Vhost: vhost, Configs: entries[from:to]})
		if err != nil {
			return false, fmt.Errorf("%w: %w", errNotLogged, err)
		}
		res, _, e := w.st.AppendRecord(context.Background(), rec)
		if !res.OK() {
			return false, fmt.Errorf("%w: %v: %w", errNotLogged, res.Status, res.Err)
		}
		end, from = e, to
	}
	if err := w.st.WaitFor(context.Background(), mark, end, w.timeout); err != nil {
		return true, fmt.Errorf("amqp: %v written to the CommitLog but not %v: %w", kind, mark, err)
	}
	return true, nil
}

// sysLogState is a vhost's side of the records: the definitions as last
// logged (the base of the next change). Guarded by vhost.mu.
type sysLogState struct {
	queues    map[string][]byte
	exchanges map[string][]byte
}

// initSysLog takes the definitions loaded at open as logged (they are
// what the files, and the records before them, hold).
func (v *vhost) initSysLog() {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.logged.queues, v.logged.exchanges = map[string][]byte{}, map[string][]byte{}
	for _, d := range v.queueDefsLocked() {
		v.logged.queues[d.Name], _ = json.Marshal(d)
	}
	for _, d := range v.exchangeDefsLocked() {
		v.logged.exchanges[d.Name], _ = json.Marshal(d)
	}
}

// queueDefsLocked are the durable queues as queues.json holds them.
func (v *vhost) queueDefsLocked() []queueDef {
	defs := []queueDef{}
	for _, q := range v.queues {
		if q.persistent() {
			var w wire.Writer
			w.Table(q.args)
			defs = append(defs, queueDef{Name: q.name, Topic: q.topic, Args: w.Buf})
		}
	}
	sort.Slice(defs, func(i, j int) bool { return defs[i].Name < defs[j].Name })
	return defs
}

// logDefsLocked logs the entries of defs (name -> JSON) that differ from
// logged, and makes defs the logged ones once they are in the log.
// v.mu is held.
func (v *vhost) logDefsLocked(kind record.Kind, logged map[string][]byte, defs map[string][]byte) error {
	w := v.srv.sys
	if w == nil {
		return nil
	}
	var entries []record.ConfigEntry
	for _, name := range slices.Sorted(maps.Keys(defs)) {
		if string(logged[name]) != string(defs[name]) {
			entries = append(entries, record.ConfigEntry{Name: name, Config: defs[name]})
		}
	}
	for _, name := range slices.Sorted(maps.Keys(logged)) {
		if _, ok := defs[name]; !ok {
			entries = append(entries, record.ConfigEntry{Name: name})
		}
	}
	logged2, err := w.write(kind, v.name, entries, store.Flushed)
	if logged2 {
		for _, e := range entries {
			if e.Config == nil {
				delete(logged, e.Name)
			} else {
				logged[e.Name] = e.Config
			}
		}
	}
	return err
}

// logQueueDefsLocked logs the change of the durable queues (before
// queues.json is written). v.mu is held.
func (v *vhost) logQueueDefsLocked(defs []queueDef) error {
	if v.srv.sys == nil {
		return nil
	}
	m, err := marshalDefs(defs, func(d queueDef) string { return d.Name })
	if err != nil {
		return err
	}
	return v.logDefsLocked(record.KindAMQPQueues, v.logged.queues, m)
}

// marshalDefs is each definition's JSON by its name.
func marshalDefs[D any](defs []D, name func(D) string) (map[string][]byte, error) {
	m := make(map[string][]byte, len(defs))
	for _, d := range defs {
		b, err := json.Marshal(d)
		if err != nil {
			return nil, err
		}
		m[name(d)] = b
	}
	return m, nil
}

// logExchangeDefsLocked logs the change of the durable exchanges and
// their bindings (before exchanges.json is written). v.mu is held.
func (v *vhost) logExchangeDefsLocked(defs []exchangeDef) error {
	if v.srv.sys == nil {
		return nil
	}
	m, err := marshalDefs(defs, func(d exchangeDef) string { return d.Name })
	if err != nil {
		return err
	}
	return v.logDefsLocked(record.KindAMQPExchanges, v.logged.exchanges, m)
}

// logAcks logs the acknowledgement state of the queues in changed (of
// acks, taken for acks.json) and waits until the
// record is Confirmed (Flushed once the server is closing: a master
// being replaced would wait for confirmations that do not come). A
// record the log did not take sets the queues dirty again.
func (v *vhost) logAcks(acks map[string]ackDef, changed []*queue) error {
	w := v.srv.sys
	if w == nil || len(changed) == 0 {
		return nil
	}
	entries := make([]record.ConfigEntry, 0, len(changed))
	for _, q := range changed {
		b, err := json.Marshal(ackEntry{ackDef: acks[q.topic]})
		if err != nil {
			return err
		}
		entries = append(entries, record.ConfigEntry{Name: q.topic, Config: b})
	}
	mark := store.Confirmed
	if v.srv.isClosed() {
		mark = store.Flushed
	}
	logged, err := w.write(record.KindAMQPAcks, v.name, entries, mark)
	if !logged {
		for _, q := range changed {
			q.mu.Lock()
			q.dirty = true
			q.mu.Unlock()
		}
	}
	return err
}

// logLeaseLocked logs the queue's state with its lease changed to lease
// and waits until it is Confirmed, before the deliveries it covers
// (Flushed once the server is closing: the trim of a clean shutdown).
// q.mu is held.
func (q *queue) logLeaseLocked(lease int64) error {
	w := q.v.srv.sys
	if w == nil || !q.persistent() || lease <= 0 {
		return nil
	}
	d := ackDef{Floor: q.floor, Delivered: q.delivered}
	for o := range q.settled {
		d.Settled = append(d.Settled, o)
	}
	slices.Sort(d.Settled)
	if len(q.returns) > 0 {
		d.Returns = maps.Clone(q.returns)
	}
	b, err := json.Marshal(ackEntry{ackDef: d, Lease: lease})
	if err != nil {
		return err
	}
	mark := store.Confirmed
	if q.v.srv.isClosed() {
		mark = store.Flushed
	}
	_, err = w.write(record.KindAMQPAcks, q.v.name, []record.ConfigEntry{{Name: q.topic, Config: b}}, mark)
	return err
}

func (s *Server) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// Mirror keeps the AMQP state of the records (the core's SystemTable
// for the AMQP kinds) in the files the AMQP door opens: queues.json,
// exchanges.json and acks.json of each vhost, with its snapshot point in
// DataDir/amqp/logpoint.json, written after them. Safe for concurrent
// use.
type Mirror struct {
	fs  vfs.FS
	dir string // DataDir/amqp
	log *slog.Logger

	mu      sync.Mutex
	point   int64 // the point as the file has it (or pulled back)
	reached int64 // end of the last record applied
	pointOK bool  // the file exists (with the point)
	vhosts  map[string]*mirrorVhost
	dirty   bool // some vhost or the point changed since the last write

	flushMu sync.Mutex // one write of the files at a time

	// DeleteTopic, if set (a replica: store.DeleteReplicatedTopic), is
	// called, from Apply, for the store topic of each deleted queue that
	// had one of its own (not an x-keel-topic), with the end of the
	// record that deleted it: the master deleted that topic too.
	DeleteTopic func(topic string, end int64) error
}

// mirrorVhost is a vhost's state as its files hold it.
type mirrorVhost struct {
	dir       string
	queues    map[string]queueDef
	exchanges map[string]json.RawMessage
	acks      map[string]ackDef
	leases    map[string]int64 // leases logged since the last write (topic -> lease)
	dropped   []string         // topics of deleted queues whose lease file goes
	dirty     bool
}

// NewMirror opens the snapshot point under dataDir/amqp (fsys nil:
// vfs.OS).
func NewMirror(fsys vfs.FS, dataDir string, log *slog.Logger) (*Mirror, error) {
	if fsys == nil {
		fsys = vfs.OS{}
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m := &Mirror{fs: fsys, dir: filepath.Join(dataDir, "amqp"), log: log, vhosts: map[string]*mirrorVhost{}}
	var p struct {
		Point *int64 `json:"keelLogOffset"`
	}
	if err := readJSON(fsys, filepath.Join(m.dir, pointFile), &p); err != nil {
		return nil, err
	}
	if p.Point != nil {
		if *p.Point < 0 {
			return nil, fmt.Errorf("amqp: %s: keelLogOffset %d", pointFile, *p.Point)
		}
		m.point, m.reached, m.pointOK = *p.Point, *p.Point, true
	}
	// Every vhost with files is read now: Holds covers their queues.
	names := []string{defaultVhost}
	entries, err := m.fs.List(filepath.Join(m.dir, "vhosts"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("amqp: %w", err)
	}
	for _, e := range entries {
		if b, err := hex.DecodeString(e); err == nil && len(b) > 0 {
			names = append(names, string(b))
		}
	}
	for _, name := range names {
		if _, err := m.vhostLocked(name); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// Holds is the store's QueueHoldsFunc on a member whose AMQP door does
// not serve (a slave): every durable queue's settled floor as the records
// say, so that the member's retention keeps what a new master would
// still deliver (stream queues hold nothing, as on the master).
func (m *Mirror) Holds() store.QueueHolds {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := store.QueueHolds{}
	for _, mv := range m.vhosts {
		for _, d := range mv.queues {
			r := wire.NewReader(d.Args)
			if a, err := parseQueueArgs(r.Table()); r.Err() == nil && err == nil && a.queueType == "stream" {
				continue
			}
			out[d.Topic] = map[int32]int64{queueID: mv.acks[d.Topic].Floor}
		}
	}
	return out
}

// Owns reports whether k is an AMQP kind.
func (m *Mirror) Owns(k record.Kind) bool { return k.IsAMQP() }

// SnapshotPoint returns the point; ok false: the directory has none (a
// directory of an earlier release, or new: the log holds no AMQP record
// before the core's own replay, since Replayed writes the point before
// the door logs anything).
func (m *Mirror) SnapshotPoint() (int64, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.point, m.pointOK
}

// PullBack lowers the point to end.
func (m *Mirror) PullBack(end int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.point > end {
		m.point, m.reached, m.dirty = end, end, true
	}
}

// vhostLocked returns the state of vhost name, read from its files the
// first time. m.mu is held.
func (m *Mirror) vhostLocked(name string) (*mirrorVhost, error) {
	if mv := m.vhosts[name]; mv != nil {
		return mv, nil
	}
	mv := &mirrorVhost{dir: vhostDir(m.dir, name), queues: map[string]queueDef{}, exchanges: map[string]json.RawMessage{}, acks: map[string]ackDef{},
		leases: map[string]int64{}}
	var defs []queueDef
	if err := readJSON(m.fs, filepath.Join(mv.dir, queuesFile), &defs); err != nil {
		return nil, err
	}
	for _, d := range defs {
		mv.queues[d.Name] = d
	}
	var exs []json.RawMessage
	if err := readJSON(m.fs, filepath.Join(mv.dir, exchangesFile), &exs); err != nil {
		return nil, err
	}
	for _, raw := range exs {
		var d exchangeDef
		if err := json.Unmarshal(raw, &d); err != nil {
			return nil, fmt.Errorf("amqp: %s: %w", exchangesFile, err)
		}
		mv.exchanges[d.Name] = raw
	}
	if err := readJSON(m.fs, filepath.Join(mv.dir, acksFile), &mv.acks); err != nil {
		return nil, err
	}
	m.vhosts[name] = mv
	return mv, nil
}

// Apply applies an AMQP record at phys ending at end, unless the files
// already hold it (phys below the point).
func (m *Mirror) Apply(phys, end int64, r *record.SystemRecord) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if phys < m.point {
		return nil
	}
	mv, err := m.vhostLocked(r.Vhost)
	if err != nil {
		return err
	}
	switch r.Kind {
	case record.KindAMQPQueues:
		for _, e := range r.Configs {
			old, had := mv.queues[e.Name]
			if e.Config == nil {
				delete(mv.queues, e.Name)
				if had {
					mv.dropTopic(old.Topic)
					if err := m.deleteTopic(old, end); err != nil {
						return err
					}
				}
				continue
			}
			var d queueDef
			if err := json.Unmarshal(e.Config, &d); err != nil || d.Name != e.Name || d.Topic == "" {
				return fmt.Errorf("amqp: %v record: queue %q: not a queue definition (%v)", r.Kind, e.Name, err)
			}
			if had && old.Topic != d.Topic {
				mv.dropTopic(old.Topic) // deleted and declared again: a new topic
				if err := m.deleteTopic(old, end); err != nil {
					return err
				}
			}
			mv.queues[e.Name] = d
		}
	case record.KindAMQPExchanges:
		for _, e := range r.Configs {
			if e.Config == nil {
				delete(mv.exchanges, e.Name)
				continue
			}
			var d exchangeDef
			if err := json.Unmarshal(e.Config, &d); err != nil || d.Name != e.Name {
				return fmt.Errorf("amqp: %v record: exchange %q: not an exchange definition (%v)", r.Kind, e.Name, err)
			}
			mv.exchanges[e.Name] = append(json.RawMessage(nil), e.Config...)
		}
	case record.KindAMQPAcks:
		for _, e := range r.Configs {
			var a ackEntry
			if e.Config == nil || json.Unmarshal(e.Config, &a) != nil {
				return fmt.Errorf("amqp: %v record: queue topic %q: not an acknowledgement state", r.Kind, e.Name)
			}
			mv.acks[e.Name] = mergeAcks(mv.acks[e.Name], a)
			if a.Lease > 0 {
				mv.leases[e.Name] = a.Lease
			}
		}
	default:
		return fmt.Errorf("amqp: system record of %v: not an AMQP kind", r.Kind)
	}
	mv.dirty, m.dirty = true, true
	m.reached = max(m.reached, end)
	return nil
}

// deleteTopic calls DeleteTopic for a deleted queue's own store topic.
func (m *Mirror) deleteTopic(d queueDef, end int64) error {
	if m.DeleteTopic == nil {
		return nil
	}
	if !strings.HasPrefix(d.Topic, "%AMQP%") {
		return nil // not a topic newTopic made: a Keel topic the queue was declared over stays
	}
	if len(d.Args) > 0 {
		r := wire.NewReader(d.Args)
		args := r.Table()
		if t, _ := keelTopic(args); r.Err() != nil || t != "" {
			return nil // over a Keel topic (or not known): it stays
		}
	}
	if err := m.DeleteTopic(d.Topic, end); err != nil {
		return fmt.Errorf("amqp: delete the store topic of deleted queue %q as the master did: %w", d.Name, err)
	}
	return nil
}

// dropTopic forgets the state of a deleted queue's topic.
func (mv *mirrorVhost) dropTopic(topic string) {
	delete(mv.acks, topic)
	delete(mv.leases, topic)
	mv.dropped = append(mv.dropped, topic)
}

// mergeAcks merges a logged state into a queue's state: every component
// only grows on the master (the floor, the delivered mark, the settled
// offsets, the return counts of unsettled offsets), so the merge is the
// state of whichever is newer, in any order.
func mergeAcks(d ackDef, a ackEntry) ackDef {
	out := ackDef{Floor: max(d.Floor, a.Floor), Delivered: max(d.Delivered, a.Delivered)}
	settled := map[int64]bool{}
	for _, o := range slices.Concat(d.Settled, a.Settled) {
		if o >= out.Floor && !settled[o] {
			settled[o] = true
			out.Settled = append(out.Settled, o)
		}
	}
	slices.Sort(out.Settled)
	for _, src := range []map[int64]int32{d.Returns, a.Returns} {
		for o, n := range src {
			if o < out.Floor || settled[o] {
				continue
			}
			if out.Returns == nil {
				out.Returns = map[int64]int32{}
			}
			out.Returns[o] = max(out.Returns[o], n)
		}
	}
	return out
}

// Replayed ends the start's replay at end: the files get what it applied
// and the point moves to end when they changed, when there was no point,
// or when it is far behind.
func (m *Mirror) Replayed(end int64) error {
	m.mu.Lock()
	if m.dirty || !m.pointOK || end-m.point > rescanBytes {
		m.reached = max(m.reached, end)
		m.dirty = true
	}
	m.mu.Unlock()
	return m.Flush()
}

// Flush writes the files of the vhosts that changed, then the point
// reached.
func (m *Mirror) Flush() error {
	m.flushMu.Lock()
	defer m.flushMu.Unlock()
	m.mu.Lock()
	if !m.dirty {
		m.mu.Unlock()
		return nil
	}
	type file struct {
		path string
		data []byte
	}
	var files []file
	var dirs, gone []string
	var changed []*mirrorVhost
	type lease struct {
		mv    *mirrorVhost
		topic string
		v     int64
	}
	var leases []lease
	for _, mv := range m.vhosts {
		if !mv.dirty {
			continue
		}
		changed = append(changed, mv)
		dirs = append(dirs, mv.dir)
		qs := make([]queueDef, 0, len(mv.queues))
		for _, name := range slices.Sorted(maps.Keys(mv.queues)) {
			qs = append(qs, mv.queues[name])
		}
		exs := make([]json.RawMessage, 0, len(mv.exchanges))
		for _, name := range slices.Sorted(maps.Keys(mv.exchanges)) {
			exs = append(exs, mv.exchanges[name])
		}
		for _, f := range []struct {
			name string
			v    any
		}{{queuesFile, qs}, {exchangesFile, exs}, {acksFile, mv.acks}} {
			b, err := json.Marshal(f.v)
			if err != nil {
				m.mu.Unlock()
				return err
			}
			files = append(files, file{filepath.Join(mv.dir, f.name), b})
		}
		for topic, v := range mv.leases {
			files = append(files, file{filepath.Join(mv.dir, "lease-"+topic), []byte(strconv.FormatInt(v, 10))})
			leases = append(leases, lease{mv, topic, v})
		}
		for _, topic := range mv.dropped {
			gone = append(gone, filepath.Join(mv.dir, "lease-"+topic))
		}
		mv.dropped = nil
		mv.dirty = false
	}
	point := m.reached
	m.dirty = false
	m.mu.Unlock()
	fail := func(err error) error {
		m.mu.Lock()
		for _, mv := range changed {
			mv.dirty = true
		}
		m.dirty = true
		m.mu.Unlock()
		return fmt.Errorf("amqp: write the replicated AMQP state: %w", err)
	}
	for _, d := range dirs {
		if err := vfs.MkdirAllDurable(m.fs, d, 0o755); err != nil {
			return fail(err)
		}
	}
	for _, f := range files {
		if err := vfs.WriteFileDurable(m.fs, f.path, f.data, 0o644); err != nil {
			return fail(err)
		}
	}
	if err := vfs.MkdirAllDurable(m.fs, m.dir, 0o755); err != nil {
		return fail(err)
	}
	b, _ := json.Marshal(map[string]int64{"keelLogOffset": point})
	if err := vfs.WriteFileDurable(m.fs, filepath.Join(m.dir, pointFile), b, 0o644); err != nil {
		return fail(err)
	}
	m.mu.Lock()
	m.point, m.pointOK = max(m.point, point), true
	for _, l := range leases {
		if l.mv.leases[l.topic] == l.v {
			delete(l.mv.leases, l.topic) // written; a later record sets it again
		}
	}
	m.mu.Unlock()
	for _, path := range gone {
		if err := m.fs.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			m.log.Warn("amqp: remove the delivery lease of a deleted queue", "path", path, "err", err)
		}
	}
	return nil
}
