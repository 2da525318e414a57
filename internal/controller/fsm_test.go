package controller

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/hashicorp/raft"
)

// fsmLog feeds commands to an FSM as raft would, one index each.
type fsmLog struct {
	t       *testing.T
	fsm     *FSM
	entries [][]byte
}

func newFSMLog(t *testing.T) *fsmLog { return &fsmLog{t: t, fsm: NewFSM()} }

func (l *fsmLog) apply(c *Command) *Result {
	l.t.Helper()
	b, err := encodeCommand(c)
	if err != nil {
		l.t.Fatal(err)
	}
	l.entries = append(l.entries, b)
	return l.fsm.Apply(&raft.Log{Index: uint64(len(l.entries)), Type: raft.LogCommand, Data: b}).(*Result)
}

func (l *fsmLog) ok(c *Command) *Result {
	l.t.Helper()
	r := l.apply(c)
	if r.Err != nil {
		l.t.Fatalf("command %+v: %v", c, r.Err)
	}
	return r
}

func (l *fsmLog) reject(c *Command, want error) {
	l.t.Helper()
	before := snapshotBytes(l.t, l.fsm)
	r := l.apply(c)
	if !errors.Is(r.Err, want) {
		l.t.Fatalf("command %+v: got %v, want %v", c, r.Err, want)
	}
	after := snapshotBytes(l.t, l.fsm)
	// A rejection changes nothing but the applied index.
	st := NewFSM()
	if err := st.Restore(io.NopCloser(bytes.NewReader(after))); err != nil {
		l.t.Fatal(err)
	}
	st.state.Index--
	if got := snapshotBytes(l.t, st); !bytes.Equal(got, before) {
		l.t.Fatalf("rejected command %+v changed the state:\n%s\n%s", c, before, got)
	}
}

func snapshotBytes(t *testing.T, f *FSM) []byte {
	t.Helper()
	s, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	return s.(snapshot)
}

const testCluster = "5f1e0c2a-0000-4000-8000-000000000001"

func register(group, store string, id ReplicaID, inc uint64) *Command {
	return &Command{Register: &RegisterReplica{ClusterID: testCluster, Group: group, StoreUUID: store, ReplicaID: id,
		Addr: "127.0.0.1:" + store, HAAddr: "127.0.0.1:h" + store, Incarnation: inc}}
}

// groupOfThree registers three replicas (ids 1, 2, 3) in broker-a and
// elects 1 at epoch 1 with all three in sync.
func groupOfThree(t *testing.T) *fsmLog {
	l := newFSMLog(t)
	l.ok(&Command{Init: &InitCluster{ClusterID: testCluster}})
	for i, s := range []string{"s1", "s2", "s3"} {
		if r := l.ok(register("broker-a", s, 0, uint64(10+i))); r.Replica != ReplicaID(i+1) {
			t.Fatalf("store %s got id %d", s, r.Replica)
		}
	}
	l.ok(&Command{TimeMillis: 1000, Elect: &ElectMaster{Group: "broker-a", ExpectEpoch: 0, NewMaster: 1, Kind: EventInitial}})
	l.ok(&Command{AlterInSync: &AlterInSync{Group: "broker-a", MasterID: 1, MasterIncarnation: 10, MasterEpoch: 1,
		ExpectInSyncEpoch: 1, InSync: []Member{{3, 12}, {1, 10}, {2, 11}}}})
	return l
}

func TestFSMElectionAndInSync(t *testing.T) {
	l := groupOfThree(t)
	g := l.fsm.Group("broker-a")
	if g.MasterID != 1 || g.MasterEpoch != 1 || g.InSyncEpoch != 2 || len(g.InSync) != 3 || g.InSync[0].ID != 1 || g.InSync[2].ID != 3 {
		t.Fatalf("group after setup: %+v", g)
	}
	r := l.ok(&Command{TimeMillis: 2000, Elect: &ElectMaster{Group: "broker-a", ExpectEpoch: 1, NewMaster: 3, Kind: EventElect,
		Fenced: []Fenced{{3, 1, 500}, {2, 1, 400}}}})
	g = r.Group
	if g.MasterID != 3 || g.MasterEpoch != 2 || g.InSyncEpoch != 3 {
		t.Fatalf("after election: %+v", g)
	}
	if want := []Member{{2, 11}, {3, 12}}; fmt.Sprint(g.InSync) != fmt.Sprint(want) {
		t.Fatalf("in-sync after election %v, want %v (old master out)", g.InSync, want)
	}
	last := g.History[len(g.History)-1]
	if last.Kind != EventElect || last.Epoch != 2 || last.OldMasterID != 1 || last.MasterID != 3 || last.TimeMillis != 2000 || last.Fenced[0].ID != 2 {
		t.Fatalf("history entry %+v", last)
	}
	// A retry of the same election after an ambiguous error succeeds
	// without a second effect.
	l.ok(&Command{TimeMillis: 2001, Elect: &ElectMaster{Group: "broker-a", ExpectEpoch: 1, NewMaster: 3, Kind: EventElect}})
	if g := l.fsm.Group("broker-a"); g.MasterEpoch != 2 || len(g.History) != 2 {
		t.Fatalf("retried election applied twice: %+v", g)
	}
	// Re-registration keeps the id and updates the incarnation.
	if r := l.ok(register("broker-a", "s1", 1, 99)); r.Replica != 1 || r.Group.Replicas[1].Incarnation != 99 {
		t.Fatalf("re-register: %+v", r)
	}
}

func TestFSMRejections(t *testing.T) {
	elect := func(expect uint32, m ReplicaID, kind string) *Command {
		return &Command{Elect: &ElectMaster{Group: "broker-a", ExpectEpoch: expect, NewMaster: m, Kind: kind}}
	}
	alter := func(master ReplicaID, inc uint64, epoch, isrEpoch uint32, isr ...Member) *Command {
		return &Command{AlterInSync: &AlterInSync{Group: "broker-a", MasterID: master, MasterIncarnation: inc,
			MasterEpoch: epoch, ExpectInSyncEpoch: isrEpoch, InSync: isr}}
	}
	cases := []struct {
		name string
		prep func(l *fsmLog)
		cmd  *Command
		want error
	}{
		{"register before init", nil, register("broker-a", "s9", 0, 1), ErrNotInitialized},
		{"init with another cluster id", nil, &Command{Init: &InitCluster{ClusterID: "other"}}, ErrClusterMismatch},
		{"register from another cluster", nil, &Command{Register: &RegisterReplica{ClusterID: "other", Group: "broker-a", StoreUUID: "s9", Addr: "a"}}, ErrClusterMismatch},
		{"register with a wrong replica id", nil, register("broker-a", "s2", 3, 1), ErrReplicaIDMismatch},
		{"register an unknown store with an id", nil, register("broker-a", "s9", 7, 1), ErrReplicaIDMismatch},
		{"register a store in a second group", nil, register("broker-b", "s2", 0, 1), ErrStoreInOtherGroup},
		{"register without address", nil, &Command{Register: &RegisterReplica{ClusterID: testCluster, Group: "broker-a", StoreUUID: "s9"}}, ErrInvalidCommand},
		{"elect at a stale epoch", nil, elect(0, 2, EventElect), ErrStaleEpoch},
		{"elect at a future epoch", nil, elect(5, 2, EventElect), ErrStaleEpoch},
		{"elect outside the in-sync set", func(l *fsmLog) {
			l.ok(alter(1, 10, 1, 2, Member{1, 10}, Member{2, 11}))
		}, elect(1, 3, EventElect), ErrNotInSync},
		{"switch over to a replica outside the in-sync set", func(l *fsmLog) {
			l.ok(alter(1, 10, 1, 2, Member{1, 10}, Member{2, 11}))
		}, elect(1, 3, EventSwitchOver), ErrNotInSync},
		{"initial election twice", nil, elect(1, 2, EventInitial), ErrStaleEpoch},
		{"elect an unknown replica", nil, elect(1, 9, EventElect), ErrUnknownReplica},
		{"elect in an unknown group", nil, &Command{Elect: &ElectMaster{Group: "nope", NewMaster: 1, Kind: EventElect}}, ErrUnknownGroup},
		{"elect with an unknown kind", nil, elect(1, 2, "coup"), ErrInvalidCommand},
		{"alter from a slave", nil, alter(2, 11, 1, 2, Member{2, 11}, Member{1, 10}), ErrNotMaster},
		{"alter at a stale master epoch", func(l *fsmLog) {
			l.ok(elect(1, 2, EventElect))
		}, alter(1, 10, 1, 3, Member{1, 10}), ErrNotMaster},
		{"alter from a stale master incarnation", nil, alter(1, 9, 1, 2, Member{1, 9}, Member{2, 11}), ErrStaleIncarnation},
		{"alter at a stale in-sync epoch", nil, alter(1, 10, 1, 1, Member{1, 10}, Member{2, 11}), ErrStaleInSyncEpoch},
		{"alter adding a stale incarnation", func(l *fsmLog) {
			l.ok(alter(1, 10, 1, 2, Member{1, 10}, Member{2, 11}))
			l.ok(register("broker-a", "s3", 3, 13)) // replica 3 restarted
		}, alter(1, 10, 1, 3, Member{1, 10}, Member{2, 11}, Member{3, 12}), ErrStaleIncarnation},
		{"alter without the master", nil, alter(1, 10, 1, 2, Member{2, 11}), ErrInvalidCommand},
		{"alter with an unknown replica", nil, alter(1, 10, 1, 2, Member{1, 10}, Member{8, 1}), ErrUnknownReplica},
		{"alter with a member twice", nil, alter(1, 10, 1, 2, Member{1, 10}, Member{2, 11}, Member{2, 11}), ErrInvalidCommand},
		{"allow unclean in an unknown group", nil, &Command{AllowUnclean: &AllowUnclean{Group: "nope", Allow: true}}, ErrUnknownGroup},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var l *fsmLog
			if tc.want == ErrNotInitialized || tc.cmd.Init != nil && tc.want == ErrClusterMismatch {
				l = newFSMLog(t)
				if tc.cmd.Init != nil {
					l.ok(&Command{Init: &InitCluster{ClusterID: testCluster}})
				}
			} else {
				l = groupOfThree(t)
			}
			if tc.prep != nil {
				tc.prep(l)
			}
			l.reject(tc.cmd, tc.want)
		})
	}
}

func TestFSMUncleanAndAudit(t *testing.T) {
	l := groupOfThree(t)
	l.ok(&Command{AlterInSync: &AlterInSync{Group: "broker-a", MasterID: 1, MasterIncarnation: 10, MasterEpoch: 1,
		ExpectInSyncEpoch: 2, InSync: []Member{{1, 10}}}})
	l.ok(&Command{TimeMillis: 5, AllowUnclean: &AllowUnclean{Group: "broker-a", Allow: true, Note: "ops ticket 7"}})
	r := l.ok(&Command{TimeMillis: 6, Elect: &ElectMaster{Group: "broker-a", ExpectEpoch: 1, NewMaster: 2, Kind: EventUnclean}})
	g := r.Group
	if g.MasterID != 2 || g.MasterEpoch != 2 || len(g.InSync) != 1 || g.InSync[0].ID != 2 {
		t.Fatalf("after unclean election: %+v", g)
	}
	h := g.History
	if len(h) != 3 || h[1].Kind != EventAllowUnclean || h[1].Note != "unclean elections allowed: ops ticket 7" || h[2].Kind != EventUnclean {
		t.Fatalf("history %+v", h)
	}
}

func TestFSMHistoryBounded(t *testing.T) {
	l := groupOfThree(t)
	for i := range 2 * MaxHistory {
		l.ok(&Command{AllowUnclean: &AllowUnclean{Group: "broker-a", Allow: i%2 == 0}})
	}
	if n := len(l.fsm.Group("broker-a").History); n != MaxHistory {
		t.Fatalf("history holds %d events, want %d", n, MaxHistory)
	}
}

// TestFSMDeterministic applies one random log to two FSMs (one of them
// restored from a snapshot half way) and compares the snapshots byte for
// byte.
func TestFSMDeterministic(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	l := newFSMLog(t)
	l.apply(&Command{Init: &InitCluster{ClusterID: testCluster}})
	groups := []string{"broker-a", "broker-b", "broker-c"}
	for i := range 400 {
		g := groups[rng.IntN(len(groups))]
		st := l.fsm.Group(g)
		var epoch, isrEpoch uint32
		var master ReplicaID
		if st != nil {
			epoch, isrEpoch, master = st.MasterEpoch, st.InSyncEpoch, st.MasterID
		}
		switch rng.IntN(4) {
		case 0:
			l.apply(register(g, fmt.Sprintf("%s-%d", g, rng.IntN(4)), 0, rng.Uint64()))
		case 1:
			kinds := []string{EventElect, EventInitial, EventUnclean}
			l.apply(&Command{TimeMillis: int64(i), Elect: &ElectMaster{Group: g, ExpectEpoch: epoch, NewMaster: ReplicaID(1 + rng.IntN(12)),
				Kind: kinds[rng.IntN(3)], Fenced: []Fenced{{ReplicaID(rng.IntN(12)), epoch, rng.Int64()}, {1, 0, 0}}}})
		case 2:
			var isr []Member
			if st != nil {
				for _, r := range st.Replicas {
					if rng.IntN(2) == 0 || r.ID == master {
						isr = append(isr, Member{r.ID, r.Incarnation})
					}
				}
			}
			inc := uint64(0)
			if st != nil && st.Replicas[master] != nil {
				inc = st.Replicas[master].Incarnation
			}
			l.apply(&Command{AlterInSync: &AlterInSync{Group: g, MasterID: master, MasterIncarnation: inc, MasterEpoch: epoch, ExpectInSyncEpoch: isrEpoch, InSync: isr}})
		case 3:
			l.apply(&Command{TimeMillis: int64(i), AllowUnclean: &AllowUnclean{Group: g, Allow: rng.IntN(2) == 0}})
		}
	}
	want := snapshotBytes(t, l.fsm)
	if len(l.fsm.State().Groups) == 0 {
		t.Fatal("the random log created no group")
	}

	replay := NewFSM()
	half := len(l.entries) / 2
	for i, b := range l.entries[:half] {
		replay.Apply(&raft.Log{Index: uint64(i + 1), Type: raft.LogCommand, Data: b})
	}
	restored := NewFSM()
	if err := restored.Restore(io.NopCloser(bytes.NewReader(snapshotBytes(t, replay)))); err != nil {
		t.Fatal(err)
	}
	for i, b := range l.entries[half:] {
		restored.Apply(&raft.Log{Index: uint64(half + i + 1), Type: raft.LogCommand, Data: b})
	}
	if got := snapshotBytes(t, restored); !bytes.Equal(got, want) {
		t.Fatalf("replay differs (seed %d):\n%s\n%s", seed, want, got)
	}
}

func TestFSMInvalidEntries(t *testing.T) {
	f := NewFSM()
	for _, data := range [][]byte{nil, []byte("{"), []byte(`{}`), []byte(`{"init":{"clusterId":"a"},"elect":{}}`)} {
		r := f.Apply(&raft.Log{Index: 1, Type: raft.LogCommand, Data: data}).(*Result)
		if !errors.Is(r.Err, ErrInvalidCommand) {
			t.Errorf("entry %q: %v, want ErrInvalidCommand", data, r.Err)
		}
	}
}

// TestOversizedCommandsNeverReachTheLog: the leader refuses before
// proposing, and Apply refuses what a peer might have proposed.
func TestOversizedCommandsNeverReachTheLog(t *testing.T) {
	h := newHarness(t)
	c := h.nodes[h.leader()]
	before := c.raft.LastIndex()
	big := make([]Member, MaxReplicasPerGroup+1)
	if _, err := c.AlterInSync(AlterInSync{Group: "broker-a", InSync: big}); !errors.Is(err, ErrInvalidCommand) {
		t.Fatalf("oversized in-sync set: %v", err)
	}
	long := string(make([]byte, MaxNameBytes+1))
	if _, err := c.Register(RegisterRequest{Group: long, StoreUUID: "s", Addr: "a"}); !errors.Is(err, ErrInvalidCommand) {
		t.Fatalf("oversized group name: %v", err)
	}
	if after := c.raft.LastIndex(); after != before {
		t.Fatalf("raft log grew from %d to %d", before, after)
	}
	l := groupOfThree(t)
	l.reject(&Command{AlterInSync: &AlterInSync{Group: "broker-a", MasterID: 1, MasterIncarnation: 10, MasterEpoch: 1, ExpectInSyncEpoch: 2, InSync: big}}, ErrInvalidCommand)
}

// FuzzDecodeCommand: any log entry either decodes to one valid command or
// is refused; applying it never panics.
func FuzzDecodeCommand(f *testing.F) {
	for _, c := range []*Command{{Init: &InitCluster{ClusterID: "x"}}, register("g", "s", 0, 1),
		{Elect: &ElectMaster{Group: "g", NewMaster: 1, Kind: EventInitial}}, {AlterInSync: &AlterInSync{Group: "g", InSync: []Member{{1, 2}}}}} {
		b, _ := encodeCommand(c)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		fsm := NewFSM()
		fsm.Apply(&raft.Log{Index: 1, Type: raft.LogCommand, Data: []byte(`{"init":{"clusterId":"` + testCluster + `"}}`)})
		r := fsm.Apply(&raft.Log{Index: 2, Type: raft.LogCommand, Data: data}).(*Result)
		if _, err := decodeCommand(data); err != nil && r.Err == nil {
			t.Fatalf("undecodable entry applied: %q", data)
		}
	})
}

// FuzzRestore: a damaged snapshot is refused or restored, never a panic.
func FuzzRestore(f *testing.F) {
	seed := NewFSM()
	for i, c := range []*Command{{Init: &InitCluster{ClusterID: testCluster}}, register("broker-a", "s1", 0, 1), register("broker-a", "s2", 0, 2),
		{Elect: &ElectMaster{Group: "broker-a", NewMaster: 1, Kind: EventInitial}}} {
		b, _ := encodeCommand(c)
		seed.Apply(&raft.Log{Index: uint64(i + 1), Type: raft.LogCommand, Data: b})
	}
	good, _ := json.Marshal(seed.state)
	f.Add(good)
	f.Add([]byte(`{"groups":{"a":null}}`))
	f.Add([]byte(`{"nextReplicaId":2,"groups":{"a":{"name":"a","masterId":1,"replicas":{"1":null}}}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		fsm := NewFSM()
		if err := fsm.Restore(io.NopCloser(bytes.NewReader(data))); err != nil {
			return
		}
		fsm.State()
		fsm.Snapshot()
		// Every command applies to a restored state without a panic.
		for _, c := range []*Command{register("a", "s9", 0, 1), {Elect: &ElectMaster{Group: "a", NewMaster: 1, Kind: EventElect}},
			{AlterInSync: &AlterInSync{Group: "a", MasterID: 1, InSync: []Member{{1, 0}}}}, {AllowUnclean: &AllowUnclean{Group: "a", Allow: true}}} {
			b, _ := encodeCommand(c)
			fsm.Apply(&raft.Log{Index: 99, Type: raft.LogCommand, Data: b})
		}
	})
}

// TestFSMKeepsTheAMQPAddress: a registration's AMQP address is kept with
// the replica (also through a snapshot) and named in the group's view as
// the master's; a registration without one clears it.
func TestFSMKeepsTheAMQPAddress(t *testing.T) {
	l := newFSMLog(t)
	l.ok(&Command{Init: &InitCluster{ClusterID: testCluster}})
	c := register("broker-a", "s1", 0, 10)
	c.Register.AMQPAddr = "127.0.0.1:5672"
	l.ok(c)
	l.ok(&Command{TimeMillis: 1000, Elect: &ElectMaster{Group: "broker-a", ExpectEpoch: 0, NewMaster: 1, Kind: EventInitial}})
	if v := viewOf(testCluster, l.fsm.Group("broker-a")); v.MasterAMQPAddr != "127.0.0.1:5672" {
		t.Fatalf("view names the master's AMQP address %q", v.MasterAMQPAddr)
	}
	restored := &FSM{}
	if err := restored.Restore(io.NopCloser(bytes.NewReader(snapshotBytes(t, l.fsm)))); err != nil {
		t.Fatal(err)
	}
	if r := restored.Group("broker-a").Replicas[1]; r == nil || r.AMQPAddr != "127.0.0.1:5672" {
		t.Fatalf("after a snapshot: %+v", r)
	}
	l.ok(register("broker-a", "s1", 1, 11))
	if r := l.fsm.Group("broker-a").Replicas[1]; r.AMQPAddr != "" {
		t.Fatalf("a registration without an AMQP address kept %q", r.AMQPAddr)
	}
}
