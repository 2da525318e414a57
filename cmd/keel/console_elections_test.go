package main

import (
	"fmt"
	"testing"

	"github.com/keelmq/keel/internal/controller"
)

// TestElectionsOf: the console's history of a group is its elections,
// with an automatic one of an in-sync replica named clean, and without
// the operator's allow-unclean switches.
func TestElectionsOf(t *testing.T) {
	st := controller.Status{Groups: []*controller.Group{{Name: "broker-b"}, {Name: "broker-a", MasterID: 2, MasterEpoch: 4, History: []controller.Event{
		{Kind: controller.EventInitial, TimeMillis: 1, Epoch: 1, MasterID: 1},
		{Kind: controller.EventElect, TimeMillis: 2, Epoch: 2, OldMasterID: 1, MasterID: 3},
		{Kind: controller.EventAllowUnclean, TimeMillis: 3, Epoch: 2, Note: "allow=true"},
		{Kind: controller.EventUnclean, TimeMillis: 4, Epoch: 3, OldMasterID: 3, MasterID: 1},
		{Kind: controller.EventSwitchOver, TimeMillis: 5, Epoch: 4, OldMasterID: 1, MasterID: 2, Note: "n"},
	}}}}
	gs := electionsOf(st)
	if len(gs) != 2 || gs[0].Group != "broker-a" || gs[1].Group != "broker-b" || len(gs[1].Elections) != 0 {
		t.Fatalf("groups %+v", gs)
	}
	var got []string
	for _, e := range gs[0].Elections {
		got = append(got, fmt.Sprintf("%d:%s:%d->%d", e.Epoch, e.Kind, e.OldMasterID, e.MasterID))
	}
	if fmt.Sprint(got) != "[1:initial:0->1 2:clean:1->3 3:unclean:3->1 4:switch-over:1->2]" || gs[0].MasterID != 2 || gs[0].MasterEpoch != 4 {
		t.Fatalf("history %v of %+v", got, gs[0])
	}
}
