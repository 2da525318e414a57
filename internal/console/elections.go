package console

import (
	"context"
	"net/http"
)

// Election history (controller mode): what the controllers hold of each
// broker group's elections, as keel controller status shows it. The
// console does not talk to the controllers itself: Config.Elections does
// (cmd/keel asks the controllerAddr of the broker serving the console).

// ElectionsFunc is Config.Elections's type.
type ElectionsFunc = func(context.Context) ([]GroupElections, error)

// Election is one entry of a group's election history.
type Election struct {
	TimeMillis  int64  `json:"time"` // the controller leader's clock when it proposed the election
	Epoch       uint32 `json:"epoch"`
	OldMasterID uint32 `json:"oldMasterId"` // 0: none (the group's first master)
	MasterID    uint32 `json:"masterId"`
	// Kind: "initial" (the group's first master), "clean" (an in-sync
	// replica after the master went silent), "unclean" (one outside the
	// in-sync set: acknowledged messages may be lost) or "switch-over"
	// (an operator's graceful move; an aborted one re-elects the master).
	Kind string `json:"kind"`
	Note string `json:"note,omitempty"`
}

// GroupElections is one broker group's master and its elections, oldest
// first.
type GroupElections struct {
	Group       string     `json:"group"`
	MasterID    uint32     `json:"masterId"`
	MasterEpoch uint32     `json:"masterEpoch"`
	Elections   []Election `json:"elections"`
}

// electionsAnswer is GET /api/elections's body.
type electionsAnswer struct {
	// ControllerMode: the broker serving the console follows controllers;
	// false: there is no election history to show.
	ControllerMode bool             `json:"controllerMode"`
	Groups         []GroupElections `json:"groups"`
}

// apiElections answers GET /api/elections: every group's election
// history from the controllers (502 when none answers). Read-only.
func (c *Console) apiElections(w http.ResponseWriter, r *http.Request) {
	if c.cfg.Elections == nil {
		writeJSON(w, http.StatusOK, electionsAnswer{Groups: []GroupElections{}})
		return
	}
	gs, err := c.cfg.Elections(r.Context())
	if err != nil {
		writeError(w, http.StatusBadGateway, "controllers: "+err.Error())
		return
	}
	if gs == nil {
		gs = []GroupElections{}
	}
	writeJSON(w, http.StatusOK, electionsAnswer{ControllerMode: true, Groups: gs})
}
