package main

import (
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/keelmq/keel/internal/controller"
)

// recordingLog is a round's log that records the fences it is given.
type recordingLog struct {
	epoch  uint32
	fences *[]uint32
}

func (r recordingLog) log() (uint32, int64) { return r.epoch, 100 }
func (r recordingLog) fence(e uint32)       { *r.fences = append(*r.fences, e) }

func testControlled(t *testing.T, fencedEpoch uint32) *controlled {
	t.Helper()
	dir := t.TempDir()
	st := `{"storeUuid":"u1","clusterId":"c1","replicaId":2,"fencedEpoch":` + strconv.FormatUint(uint64(fencedEpoch), 10) + `}`
	if err := os.WriteFile(filepath.Join(dir, controller.AgentFile), []byte(st), 0o600); err != nil {
		t.Fatal(err)
	}
	c := &controlled{log: slog.New(slog.DiscardHandler)}
	a, err := controller.OpenAgent(controller.AgentConfig{Group: "broker-a", Dir: dir, Addr: "127.0.0.1:1", Controllers: []string{"127.0.0.1:2"},
		Log: c.logEnd, Fence: c.fence})
	if err != nil {
		t.Fatal(err)
	}
	c.agent = a
	return c
}

// TestControlledRoleDecisions: a view naming this broker master is taken
// only above the epochs its log and its promise hold (a restarted master
// never takes back the role of an election before its restart); a
// replaced master is fenced at once, before its round stops.
func TestControlledRoleDecisions(t *testing.T) {
	c := testControlled(t, 0)
	var fences []uint32
	c.cur = recordingLog{epoch: 3, fences: &fences}
	cancelled := 0
	c.cancel = func() { cancelled++ }

	c.onView(controller.GroupView{MasterID: 2, MasterEpoch: 3})
	if c.next != nil || cancelled != 0 {
		t.Fatalf("took the master role of epoch 3, which its history holds: %+v", c.next)
	}
	c.onView(controller.GroupView{MasterID: 2, MasterEpoch: 4})
	if c.next == nil || c.next.kind != roleMaster || c.next.epoch != 4 || cancelled != 1 {
		t.Fatalf("elected at 4: next %+v, cancelled %d", c.next, cancelled)
	}
	c.running, c.next = *c.next, nil
	c.onView(controller.GroupView{MasterID: 2, MasterEpoch: 4})
	if c.next != nil {
		t.Fatal("the same role again restarted the round")
	}
	c.onView(controller.GroupView{MasterID: 1, MasterEpoch: 5, MasterHAAddr: "127.0.0.1:3"})
	if c.next == nil || c.next.kind != roleSlave || c.next.masterHA != "127.0.0.1:3" || len(fences) != 1 || fences[0] != 5 {
		t.Fatalf("replaced: next %+v, fences %v", c.next, fences)
	}

	// A promise above the view's epoch: a newer election is under way.
	c2 := testControlled(t, 7)
	c2.cur = recordingLog{epoch: 3, fences: &fences}
	c2.onView(controller.GroupView{MasterID: 2, MasterEpoch: 6})
	if c2.next != nil {
		t.Fatalf("took the master role of epoch 6 after promising 7: %+v", c2.next)
	}
}
