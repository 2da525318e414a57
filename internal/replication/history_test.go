package replication

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/store"
	"github.com/keelmq/keel/internal/vfs"
)

// Random histories of a master and its slave on the crash-simulating
// filesystem, driven step by step without a network through the same
// functions the connections run (planHello, accept, nextData, apply):
// appends on the master (some acknowledged before their fdatasync, as
// WAIT=false allows, so the slave can hold bytes the master then loses),
// replication, flushes, power losses of either side (with torn writes),
// and handshakes that crash the slave after any durable step of a
// truncation. After every step:
//
//   - a slave that has followed the master since its last handshake holds
//     a byte-identical prefix of the master's log, also right after its
//     own power loss (a truncated tail that came back would differ);
//   - the slave shows nothing the master did not confirm, and a
//     truncation is never refused for taking back what it showed;
//   - at the end, healed, the two logs are byte-identical.

// histOps are the steps, chosen by one byte each (op = b % 8, arg = b / 8).
const (
	hAppend = iota
	hAppendWait
	hMasterFlush
	hReplicate
	hSlaveFlush
	hMasterCrash
	hSlaveCrash
	hHandshake // arg%5: crash the slave at that truncation step (4: none)
)

var truncSteps = []string{store.TruncateStepIntent, store.TruncateStepLog, store.TruncateStepCheckpoint, store.TruncateStepDone}

type histSim struct {
	t   testing.TB
	rng *rand.Rand

	mfs    *vfs.MemFS
	master *store.Store
	m      *Master

	slaveSync bool
	prefill   bool // SYNC_FLUSH stores keep zero-filled room ahead
	sfs       *vfs.MemFS
	slave     *store.Store
	s         *Slave
	crashAt   string     // the truncation step at which the slave crashes
	clone     *vfs.MemFS // the slave's disk as that crash left it

	synced    bool  // the slave follows the master since its last handshake
	confirmed int64 // the highest confirmed offset the master told the slave
	seq       int
	log       []string
}

func histConfig(fs vfs.FS, sync, prefill bool) store.Config {
	cfg := storeConfig(fs)
	cfg.CommitLogSegmentBytes = 48 << 10
	cfg.MaxMessageBytes = 2 << 10
	cfg.FlushInterval = time.Hour // flushes only when asked
	cfg.FlushConsumeQueueInterval = time.Hour
	cfg.FlushDiskType = store.AsyncFlush
	if sync {
		cfg.FlushDiskType = store.SyncFlush
	}
	if !prefill {
		cfg.PrefillBytes = -1 // its fdatasyncs would make the unflushed tail durable at random
	}
	return cfg
}

func (h *histSim) fatalf(format string, args ...any) {
	h.t.Helper()
	h.t.Fatalf("%s\nsteps: %v", fmt.Sprintf(format, args...), h.log)
}

func (h *histSim) openMaster() {
	h.t.Helper()
	st, err := store.Open(histConfig(h.mfs, true, h.prefill))
	if err != nil {
		h.fatalf("open master: %v", err)
	}
	m, err := NewMaster(MasterConfig{Store: st, FS: h.mfs, DataDir: "/data", BrokerName: "broker-a", ChunkBytes: 3 << 10})
	if err != nil {
		h.fatalf("new master: %v", err)
	}
	h.master, h.m = st, m
}

func (h *histSim) openSlave() {
	h.t.Helper()
	cfg := histConfig(h.sfs, h.slaveSync, h.prefill)
	cfg.Replica = true
	cfg.TruncateFailpoint = func(step string) {
		if step == h.crashAt && h.clone == nil {
			h.clone = h.sfs.CrashCloneWith(h.rng)
		}
	}
	st, err := store.Open(cfg)
	if err != nil {
		h.fatalf("open slave: %v", err)
	}
	s, err := NewSlave(SlaveConfig{Store: st, FS: h.sfs, DataDir: "/data", BrokerName: "broker-a", BrokerID: 1, SyncFlush: h.slaveSync})
	if err != nil {
		h.fatalf("new slave: %v", err)
	}
	h.slave, h.s = st, s
	if v := st.VisibleOffset(); v > h.confirmed {
		h.fatalf("reopened slave shows %d, the master confirmed %d", v, h.confirmed)
	}
}

func (h *histSim) appendMsgs(n int, wait bool) {
	for range n {
		h.seq++
		m := msg("T", fmt.Sprintf("%d-%0*d", h.seq, 50+h.rng.IntN(1200), h.seq))
		m.QueueID = int32(h.seq % 3)
		if !wait {
			m.Properties = message.EncodeProperties(map[string]string{message.PropWaitStoreMsgOK: "false"})
		}
		if r := h.master.PutMessage(h.t.Context(), m); !r.OK() {
			h.fatalf("master put: %v %v", r.Status, r.Err)
		}
	}
}

func flush(t testing.TB, st *store.Store) {
	if err := st.WaitFor(t.Context(), store.Flushed, st.Offset(store.Written), 10*time.Second); err != nil {
		t.Fatalf("flush: %v", err)
	}
}

// handshake runs the slave's HELLO against the master; with crashAt set,
// a truncation it leads to crashes the slave after that step.
func (h *histSim) handshake(crashAt string) {
	h.t.Helper()
	for range 3 {
		hl, err := h.s.makeHello()
		if err != nil {
			h.fatalf("hello: %v", err)
		}
		ans, cut, err := h.m.planHello(hl, h.master.Offset(store.Written))
		if err != nil {
			h.fatalf("master refused the slave (log end %d, epochs %v; master %v, end %d): %v",
				hl.LogEnd, hl.Epochs, h.m.History(), h.master.Offset(store.Written), err)
		}
		if testing.Verbose() {
			h.t.Logf("hello end %d epochs %v -> master end %d epochs %v truncate %d cut %v", hl.LogEnd, hl.Epochs, ans.MasterEnd, ans.Epochs, ans.TruncateTo, cut)
		}
		h.crashAt, h.clone = crashAt, nil
		err = h.s.accept(hl, ans)
		h.crashAt = ""
		if h.clone != nil {
			// The slave lost power after that step: it restarts from the
			// disk as the crash left it.
			histStats.crashes++
			h.slave.Close()
			h.sfs = h.clone
			h.openSlave()
			if w := h.slave.Offset(store.Written); w > ans.TruncateTo {
				h.fatalf("after a crash at truncation step %q the slave ends at %d, past the truncation point %d", crashAt, w, ans.TruncateTo)
			}
			h.checkPrefix("after a crash during truncation")
			crashAt = ""
			continue
		}
		switch {
		case cut && errors.Is(err, errTruncated):
			histStats.truncations++
			if w := h.slave.Offset(store.Written); w != ans.TruncateTo {
				h.fatalf("truncated to %d, slave ends at %d", ans.TruncateTo, w)
			}
			continue
		case err != nil:
			h.fatalf("slave refused the master's answer %+v: %v", ans, err)
		}
		h.synced = true
		h.checkPrefix("after the handshake")
		return
	}
	h.fatalf("no agreement after three handshakes")
}

// checkPrefix: the slave's log is a byte-identical prefix of the master's.
func (h *histSim) checkPrefix(when string) {
	h.t.Helper()
	if sw, mw := h.slave.Offset(store.Written), h.master.Offset(store.Written); sw > mw {
		h.fatalf("%s: slave ends at %d, past the master's %d", when, sw, mw)
	}
	sameLogsOrFail(h, h.slave, h.master)
}

func sameLogsOrFail(h *histSim, a, b *store.Store) {
	end := min(a.Offset(store.Written), b.Offset(store.Written))
	var ba, bb []byte
	for pos := int64(0); pos < end; {
		ra, na, err1 := a.ReadReplication(pos, end, 8<<10, ba)
		rb, nb, err2 := b.ReadReplication(pos, end, 8<<10, bb)
		if err1 != nil || err2 != nil {
			h.fatalf("read at %d: %v %v", pos, err1, err2)
		}
		if na != nb || string(ra) != string(rb) || na == pos {
			h.fatalf("slave's and master's logs differ in the range at %d (ends %d, %d)", pos, na, nb)
		}
		pos, ba, bb = na, ra, rb
	}
}

func (h *histSim) replicate(frames int) {
	h.t.Helper()
	if !h.synced {
		h.handshake("")
	}
	var raw []byte
	end := h.slave.Offset(store.Written)
	for range frames {
		d, next, err := h.m.nextData(end, raw, false)
		if err != nil {
			h.fatalf("next data at %d: %v", end, err)
		}
		h.confirmed = max(h.confirmed, d.Confirmed)
		got, err := h.s.apply(d, end)
		if err != nil {
			h.fatalf("apply at %d: %v", end, err)
		}
		if got != next {
			h.fatalf("apply at %d ended at %d, the master's range at %d", end, got, next)
		}
		if len(d.Raw) == 0 {
			break
		}
		end, raw = next, d.Raw
	}
	h.checkPrefix("after replicating")
}

// torn picks the power loss of a crash step: an odd arg keeps a random
// prefix of the unsynced writes (torn), an even one none.
func (h *histSim) torn(arg int) *rand.Rand {
	if arg%2 == 1 {
		return h.rng
	}
	return nil
}

func (h *histSim) step(b byte) {
	op, arg := int(b%8), int(b/8)
	h.log = append(h.log, fmt.Sprintf("%d/%d", op, arg))
	switch op {
	case hAppend, hAppendWait:
		h.appendMsgs(1+arg%6, op == hAppendWait)
	case hMasterFlush:
		flush(h.t, h.master)
	case hReplicate:
		h.replicate(1 + arg%4)
	case hSlaveFlush:
		flush(h.t, h.slave)
	case hMasterCrash:
		if testing.Verbose() {
			h.t.Logf("master crash: written %d flushed %d, slave %d", h.master.Offset(store.Written), h.master.Offset(store.Flushed), h.slave.Offset(store.Written))
		}
		// The disk as the power loss leaves it; the old store's Close
		// writes nothing that survives.
		clone := h.mfs.CrashCloneWith(h.torn(arg))
		h.master.Close()
		h.mfs = clone
		h.openMaster()
		h.synced = false // it may have lost bytes the slave holds
	case hSlaveCrash:
		clone := h.sfs.CrashCloneWith(h.torn(arg))
		h.slave.Close()
		h.sfs = clone
		h.openSlave()
		if h.synced {
			h.checkPrefix("after the slave's power loss")
		}
	case hHandshake:
		at := ""
		if arg%5 < len(truncSteps) {
			at = truncSteps[arg%5]
		}
		h.handshake(at)
	}
	if v := h.slave.VisibleOffset(); v > h.confirmed {
		h.fatalf("slave shows %d, the master confirmed %d", v, h.confirmed)
	}
	if testing.Verbose() {
		h.t.Logf("after %d/%d: slave w=%d f=%d v=%d cq=%d,%d,%d | master w=%d f=%d cq=%d,%d,%d", op, arg,
			h.slave.Offset(store.Written), h.slave.Offset(store.Flushed), h.slave.VisibleOffset(),
			h.slave.MaxOffset("T", 0), h.slave.MaxOffset("T", 1), h.slave.MaxOffset("T", 2),
			h.master.Offset(store.Written), h.master.Offset(store.Flushed),
			h.master.MaxOffset("T", 0), h.master.MaxOffset("T", 1), h.master.MaxOffset("T", 2))
	}
}

// heal flushes the master, lets the slave catch up, and checks the two
// logs are byte-identical, also after a last power loss of the slave.
func (h *histSim) heal() {
	flush(h.t, h.master)
	h.handshake("")
	for h.slave.Offset(store.Written) < h.master.Offset(store.Written) {
		h.replicate(8)
	}
	h.replicate(1) // a heartbeat: the last confirmed offset
	if sw, mw := h.slave.Offset(store.Written), h.master.Offset(store.Written); sw != mw {
		h.fatalf("healed: slave ends at %d, master at %d", sw, mw)
	}
	flush(h.t, h.slave)
	clone := h.sfs.CrashClone()
	h.slave.Close()
	h.sfs = clone
	h.openSlave()
	if sw, mw := h.slave.Offset(store.Written), h.master.Offset(store.Written); sw != mw {
		h.fatalf("healed and power lost: slave ends at %d, master at %d", sw, mw)
	}
	h.checkPrefix("healed")
	sh, mh := h.s.History(), h.m.History()
	for _, e := range sh {
		found := false
		for _, x := range mh {
			found = found || x == e
		}
		if !found {
			h.fatalf("slave epoch %v not in the master's history %v", e, mh)
		}
	}
}

func (h *histSim) close() {
	if h.slave != nil {
		h.slave.Close()
	}
	if h.master != nil {
		h.master.Close()
	}
}

// runHistory plays ops (the first byte picks the slave's flush mode and
// prefilling, and seeds the torn writes).
func runHistory(t testing.TB, ops []byte) {
	if len(ops) == 0 {
		return
	}
	if len(ops) > 48 {
		ops = ops[:48]
	}
	h := &histSim{t: t, rng: rand.New(rand.NewPCG(uint64(ops[0]), uint64(len(ops)))), mfs: vfs.NewMem(), sfs: vfs.NewMem(), slaveSync: ops[0]&1 == 1, prefill: ops[0]&2 != 0}
	defer h.close()
	h.openMaster()
	h.openSlave()
	for _, b := range ops[1:] {
		h.step(b)
	}
	h.heal()
}

// op builds a step byte.
func op(kind, arg int) byte { return byte(kind + 8*arg) }

// The histories every run plays: the master loses a tail the slave holds
// and the slave crashes after each truncation step; a double loss (two
// master restarts before the slave returns); crashes of both sides.
var histSeeds = [][]byte{
	{1, op(hAppendWait, 3), op(hReplicate, 3), op(hAppend, 5), op(hReplicate, 3), op(hSlaveFlush, 0), op(hMasterCrash, 0),
		op(hAppendWait, 2), op(hHandshake, 0), op(hReplicate, 3)},
	{0, op(hAppendWait, 2), op(hReplicate, 1), op(hAppend, 5), op(hReplicate, 3), op(hSlaveFlush, 0), op(hMasterCrash, 0),
		op(hAppend, 4), op(hHandshake, 1), op(hSlaveCrash, 0), op(hReplicate, 2)},
	{0, op(hAppendWait, 3), op(hReplicate, 3), op(hAppend, 5), op(hReplicate, 3), op(hSlaveFlush, 0), op(hMasterCrash, 0),
		op(hAppendWait, 2), op(hHandshake, 2), op(hReplicate, 3)},
	{1, op(hAppendWait, 3), op(hReplicate, 3), op(hAppend, 5), op(hReplicate, 3), op(hSlaveFlush, 0), op(hMasterCrash, 0),
		op(hAppendWait, 2), op(hHandshake, 3), op(hReplicate, 3)},
	{0, op(hAppendWait, 4), op(hAppend, 5), op(hReplicate, 3), op(hReplicate, 3), op(hSlaveFlush, 0), op(hMasterCrash, 0),
		op(hAppend, 3), op(hMasterFlush, 0), op(hMasterCrash, 0), op(hAppend, 2), op(hHandshake, 4), op(hSlaveCrash, 0)},
}

// histStats counts what the histories exercised (one goroutine plays them).
var histStats struct{ truncations, crashes int }

func TestRandomHistories(t *testing.T) {
	histStats.truncations, histStats.crashes = 0, 0
	for i, s := range histSeeds {
		t.Run(fmt.Sprint("seed", i), func(t *testing.T) { runHistory(t, s) })
	}
	// The seeds are written to truncate, and to crash after each step of a
	// truncation.
	if histStats.truncations < 1 || histStats.crashes < len(truncSteps) {
		t.Fatalf("the seed histories truncated %d times and crashed during a truncation %d times", histStats.truncations, histStats.crashes)
	}
	n := 200
	if os.Getenv("KEEL_LONG") == "1" {
		n = 2000
	}
	for i := range n {
		r := rand.New(rand.NewPCG(uint64(i), 16))
		ops := make([]byte, 8+r.IntN(30))
		for j := range ops {
			ops[j] = byte(r.IntN(256))
		}
		if !t.Run(fmt.Sprint("random", i), func(t *testing.T) { runHistory(t, ops) }) {
			t.Logf("ops %v", ops)
			return
		}
	}
	t.Logf("%d truncations, %d crashes during a truncation", histStats.truncations, histStats.crashes)
}

func FuzzTruncation(f *testing.F) {
	for _, s := range histSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, ops []byte) { runHistory(t, ops) })
}
