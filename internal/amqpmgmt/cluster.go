package amqpmgmt

// The cluster's queues (Config.Cluster): /api/queues, /api/queues/{vhost},
// /api/queues/{vhost}/{name}, /api/vhosts and /api/overview's counts
// show the queues of every broker group of the cluster, each with the
// node (group) that stores it; /api/nodes lists the groups, a group
// whose queues could not be read with running false and why, as
// /api/overview's unreachable_nodes does.

import (
	"context"
	"slices"

	"github.com/keelmq/keel/internal/amqpinfo"
)

// Group is another broker group's AMQP door as the API shows it: its
// queues, or why they could not be read.
type Group struct {
	Node   string // its node name, as every object it stores shows it
	Queues []Queue
	Err    string // "": it answered
}

// Queue is a queue with its queue.declare arguments as JSON values (nil:
// none), as a group reports it to the others.
type Queue struct {
	amqpinfo.Queue
	Arguments map[string]any `json:"arguments,omitempty"`
}

// Cluster returns the other broker groups of the cluster, each asked
// within a bounded time, for the logged-in user; one that did not answer
// is given with Err, never left out.
type Cluster func(ctx context.Context, user string) []Group

// nodeQueue is a queue with the node that stores it.
type nodeQueue struct {
	Queue
	node   string
	remote bool // another group's: its arguments came with it
}

// clusterQueues returns every queue of the cluster by vhost, name and
// node, and the groups whose queues could not be read.
func (a *api) clusterQueues(ctx context.Context, user string) ([]nodeQueue, []Group) {
	var out []nodeQueue
	for _, q := range a.cfg.Source.Queues() {
		out = append(out, nodeQueue{Queue: Queue{Queue: q}, node: a.cfg.Node})
	}
	if a.cfg.Cluster == nil {
		return out, nil
	}
	var down []Group
	for _, g := range a.cfg.Cluster(ctx, user) {
		if g.Err != "" {
			down = append(down, g)
			continue
		}
		for _, q := range g.Queues {
			out = append(out, nodeQueue{Queue: q, node: g.Node, remote: true})
		}
	}
	slices.SortStableFunc(out, func(x, y nodeQueue) int {
		switch {
		case x.Vhost != y.Vhost:
			return cmpStr(x.Vhost, y.Vhost)
		case x.Name != y.Name:
			return cmpStr(x.Name, y.Name)
		}
		return cmpStr(x.node, y.node)
	})
	return out, down
}

// unreachable renders the groups whose queues could not be read.
func unreachable(down []Group) []object {
	out := []object{}
	for _, g := range down {
		out = append(out, object{"name": g.Node, "reason": g.Err})
	}
	return out
}

// nodes serves /api/nodes: this member's node, then the cluster's other
// groups, running false for one that did not answer.
func (a *api) nodes(r request) (any, error) {
	out := []object{{"name": a.cfg.Node, "type": "disc", "running": true}}
	if a.cfg.Cluster != nil {
		for _, g := range a.cfg.Cluster(r.Context(), r.user) {
			o := object{"name": g.Node, "type": "disc", "running": g.Err == ""}
			if g.Err != "" {
				o["reason"] = g.Err
			}
			out = append(out, o)
		}
	}
	if name := r.arg(0); name != "" {
		for _, o := range out {
			if o["name"] == name {
				return one(r, o)
			}
		}
		return nil, errNotFound
	}
	return list(r, out)
}
