package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/keelmq/keel/internal/acl"
	"github.com/keelmq/keel/internal/amqpmgmt"
	"github.com/keelmq/keel/internal/broker"
	"github.com/keelmq/keel/internal/namesrv"
	"github.com/keelmq/keel/internal/remoting"
)

// amqpListingTimeout bounds how long the management API waits for the
// other groups' queues (the NameServer's answer included).
const amqpListingTimeout = 5 * time.Second

// amqpListing is amqpmgmt.Cluster: the AMQP queues of the cluster's other
// broker groups, asked of each group's master with LIST_AMQP over
// RocketMQ remoting (as the Kafka door's forwards: over TLS with
// parts.peerTLS), all at once within amqpListingTimeout, on a connection
// of its own each time (an operator's request, not a data path). With
// access control on, the request is signed as the logged-in management
// user (an admin account). A group this member saw registered since it
// started and that has no master registered now, or whose master does
// not answer in time, is given with why.
type amqpListing struct {
	b       *broker.Broker
	cluster string
	group   string      // this member's brokerName, left out
	tls     *tls.Config // nil: plain TCP
	// secret returns an account's secret key (nil: access control off).
	secret func(user string) (string, bool)

	mu   sync.Mutex
	seen map[string]bool // the other groups seen since the start
}

func newAMQPListing(b *broker.Broker, cluster, group string, tc *tls.Config) *amqpListing {
	return &amqpListing{b: b, cluster: cluster, group: group, tls: tc, seen: map[string]bool{}}
}

// groups is amqpmgmt.Cluster.
func (l *amqpListing) groups(ctx context.Context, user string) []amqpmgmt.Group {
	ctx, cancel := context.WithTimeout(ctx, amqpListingTimeout)
	defer cancel()
	masters, nsErr := l.masters(ctx)
	l.mu.Lock()
	for g := range masters {
		l.seen[g] = true
	}
	names := make([]string, 0, len(l.seen))
	for g := range l.seen {
		names = append(names, g)
	}
	l.mu.Unlock()
	slices.Sort(names)
	out := make([]amqpmgmt.Group, len(names))
	var wg sync.WaitGroup
	for i, g := range names {
		out[i].Node = amqpNode(g)
		addr, ok := masters[g]
		switch {
		case ok:
			wg.Add(1)
			go func() {
				defer wg.Done()
				qs, err := l.list(ctx, addr, user)
				if err != nil {
					out[i].Err = fmt.Sprintf("the master of broker group %s (%s) did not answer: %v", g, addr, err)
				}
				out[i].Queues = qs
			}()
		case nsErr != nil:
			out[i].Err = fmt.Sprintf("the NameServers did not answer where broker group %s's master is: %v", g, nsErr)
		default:
			out[i].Err = "no master of broker group " + g + " is registered with the NameServers"
		}
	}
	wg.Wait()
	return out
}

// amqpNode is the management API's node name of a broker group.
func amqpNode(group string) string { return "keel@" + group }

// masters returns the RocketMQ address of each other group's master with
// an AMQP door, by group.
func (l *amqpListing) masters(ctx context.Context) (map[string]string, error) {
	var ac namesrv.AMQPCluster
	err := l.b.AskNamesrv(ctx, func(c *remoting.Client) (err error) {
		ac, err = namesrv.GetAMQPCluster(ctx, c, l.cluster)
		return err
	})
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, m := range ac.Members {
		if m.BrokerID == 0 && m.BrokerName != l.group {
			out[m.BrokerName] = m.Addr
		}
	}
	return out, nil
}

// list asks the master at addr for its AMQP queues.
func (l *amqpListing) list(ctx context.Context, addr, user string) ([]amqpmgmt.Queue, error) {
	c, err := remoting.Dial(ctx, addr, remoting.ClientConfig{TLS: l.tls})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	req := remoting.NewRequest(remoting.ReqListAMQP, map[string]string{}, nil)
	if l.secret != nil && user != "" {
		if sk, ok := l.secret(user); ok {
			acl.SignRequest(req, user, sk)
		}
	}
	resp, err := c.Invoke(ctx, req)
	if err != nil {
		return nil, err
	}
	if resp.Code != remoting.ResSuccess {
		return nil, fmt.Errorf("answered %s (%d): %s", remoting.ResponseCode(resp.Code), resp.Code, resp.Remark)
	}
	var rep struct {
		Enabled bool             `json:"enabled"`
		Queues  []amqpmgmt.Queue `json:"queues"`
	}
	if err := json.Unmarshal(resp.Body, &rep); err != nil {
		return nil, fmt.Errorf("answer: %w", err)
	}
	if !rep.Enabled {
		return nil, fmt.Errorf("its AMQP door is off")
	}
	return rep.Queues, nil
}
