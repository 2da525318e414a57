package main

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/keelmq/keel/internal/config"
	"github.com/keelmq/keel/internal/console"
	"github.com/keelmq/keel/internal/controller"
)

// consoleElections is the console's election history of a broker in
// controller mode: the controllers' status, asked through cl (the
// broker's controllerAddr), as the console shows it.
func consoleElections(cl *controller.Client) console.ElectionsFunc {
	return func(ctx context.Context) ([]console.GroupElections, error) {
		ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		st, err := cl.Status(ctx)
		if err != nil {
			return nil, err
		}
		return electionsOf(st), nil
	}
}

// electionsOf keeps the elections of every group's history (not the
// operator's allow-unclean switches), with the kinds the console names.
func electionsOf(st controller.Status) []console.GroupElections {
	out := []console.GroupElections{}
	for _, g := range st.Groups {
		ge := console.GroupElections{Group: g.Name, MasterID: uint32(g.MasterID), MasterEpoch: g.MasterEpoch, Elections: []console.Election{}}
		for _, e := range g.History {
			kind := e.Kind
			switch e.Kind {
			case controller.EventElect:
				kind = "clean"
			case controller.EventInitial, controller.EventUnclean, controller.EventSwitchOver:
			default:
				continue
			}
			ge.Elections = append(ge.Elections, console.Election{TimeMillis: e.TimeMillis, Epoch: e.Epoch,
				OldMasterID: uint32(e.OldMasterID), MasterID: uint32(e.MasterID), Kind: kind, Note: e.Note})
		}
		out = append(out, ge)
	}
	slices.SortFunc(out, func(a, b console.GroupElections) int { return strings.Compare(a.Group, b.Group) })
	return out
}

// controllerClientOf is the controllers' client of a broker in controller
// mode (nil otherwise).
func controllerClientOf(b *config.Broker) *controller.Client {
	if !b.EnableControllerMode {
		return nil
	}
	return controller.NewClient(b.ControllerAddrs())
}
