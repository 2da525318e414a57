package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/keelmq/keel/internal/remoting"
)

// The controller's RPCs over Keel's remoting protocol: private request
// codes (remoting/codes.go), a JSON body each way, frames bounded by
// MaxFrameBytes. A rejection is ResControllerRejected with ext reason (a
// name from reasons) and the error text as remark; a non-leader answers
// ResControllerNotLeader with ext leaderAddr.

// reasons names every rejection on the wire.
var reasons = map[string]error{
	"NOT_LEADER":           ErrNotLeader,
	"CLUSTER_MISMATCH":     ErrClusterMismatch,
	"NOT_INITIALIZED":      ErrNotInitialized,
	"STALE_EPOCH":          ErrStaleEpoch,
	"STALE_IN_SYNC_EPOCH":  ErrStaleInSyncEpoch,
	"NOT_MASTER":           ErrNotMaster,
	"NOT_IN_SYNC":          ErrNotInSync,
	"UNKNOWN_GROUP":        ErrUnknownGroup,
	"UNKNOWN_REPLICA":      ErrUnknownReplica,
	"STALE_INCARNATION":    ErrStaleIncarnation,
	"REPLICA_ID_MISMATCH":  ErrReplicaIDMismatch,
	"STORE_IN_OTHER_GROUP": ErrStoreInOtherGroup,
	"LIMIT":                ErrLimit,
	"INVALID":              ErrInvalidCommand,
	"FENCED":               ErrFenced,
	"BUSY":                 ErrBusy,
	"SWITCH_OVER_ABORTED":  ErrSwitchOverAborted,
}

// ErrFenced is a broker's refusal of a fence below an epoch it promised.
var ErrFenced = errors.New("controller: replica fenced at a higher epoch")

func reasonOf(err error) string {
	for name, e := range reasons {
		if errors.Is(err, e) {
			return name
		}
	}
	return ""
}

// RemoteError is a rejection received over the wire; errors.Is matches
// the sentinel its reason names.
type RemoteError struct {
	Reason string
	Msg    string
}

func (e *RemoteError) Error() string { return e.Msg }
func (e *RemoteError) Unwrap() error { return reasons[e.Reason] }

// errorResponse encodes err as the answer to req.
func errorResponse(req *remoting.Command, err error) *remoting.Command {
	var nl *NotLeaderError
	if errors.As(err, &nl) {
		resp := req.NewResponse(remoting.ResControllerNotLeader, err.Error())
		resp.SetExt("leaderAddr", nl.Leader)
		return resp
	}
	reason := reasonOf(err)
	if reason == "" {
		return req.NewResponse(remoting.ResSystemError, err.Error())
	}
	resp := req.NewResponse(remoting.ResControllerRejected, err.Error())
	resp.SetExt("reason", reason)
	return resp
}

// responseError decodes a non-success answer.
func responseError(resp *remoting.Command) error {
	switch resp.Code {
	case remoting.ResControllerNotLeader:
		return &NotLeaderError{Leader: resp.Ext("leaderAddr")}
	case remoting.ResControllerRejected:
		return &RemoteError{Reason: resp.Ext("reason"), Msg: resp.Remark}
	}
	return fmt.Errorf("controller: %s: %s", remoting.ResponseCode(resp.Code), resp.Remark)
}

func okResponse(req *remoting.Command, v any) *remoting.Command {
	b, err := json.Marshal(v)
	if err != nil {
		return req.NewResponse(remoting.ResSystemError, err.Error())
	}
	resp := req.NewResponse(remoting.ResSuccess, "")
	resp.Body = b
	return resp
}

func decodeBody(req *remoting.Command, v any) error {
	if err := json.Unmarshal(req.Body, v); err != nil {
		return fmt.Errorf("%w: body of %s: %v", ErrInvalidCommand, remoting.RequestCode(req.Code), err)
	}
	return nil
}

// Handler serves the controller's requests.
func (c *Controller) Handler() remoting.Handler {
	return remoting.HandlerFunc(func(ctx context.Context, _ *remoting.Conn, req *remoting.Command) *remoting.Command {
		v, err := c.serve(ctx, req)
		if err != nil {
			return errorResponse(req, err)
		}
		return okResponse(req, v)
	})
}

func (c *Controller) serve(ctx context.Context, req *remoting.Command) (any, error) {
	switch req.Code {
	case remoting.ReqControllerRegister:
		var r RegisterRequest
		if err := decodeBody(req, &r); err != nil {
			return nil, err
		}
		return c.Register(r)
	case remoting.ReqControllerHeartbeat:
		var r HeartbeatRequest
		if err := decodeBody(req, &r); err != nil {
			return nil, err
		}
		return c.Heartbeat(r)
	case remoting.ReqControllerAlterInSync:
		var r AlterInSync
		if err := decodeBody(req, &r); err != nil {
			return nil, err
		}
		return c.AlterInSync(r)
	case remoting.ReqControllerAllowUnclean:
		var r AllowUnclean
		if err := decodeBody(req, &r); err != nil {
			return nil, err
		}
		return c.SetAllowUnclean(r)
	case remoting.ReqControllerSwitchOver:
		var r SwitchOverRequest
		if err := decodeBody(req, &r); err != nil {
			return nil, err
		}
		return c.SwitchOver(ctx, r)
	case remoting.ReqControllerGetGroup:
		return c.GetGroup(req.Ext("group"))
	case remoting.ReqControllerStatus:
		return c.Status()
	}
	return nil, fmt.Errorf("%w: request code %d", ErrInvalidCommand, req.Code)
}

// Client is a broker's or the CLI's connection to the controller cluster:
// it finds the leader (following the not-leader answers) and keeps one
// connection per node it reached. A call retries not-leader answers and
// transport errors until ctx ends: give every call a deadline.
type Client struct {
	addrs []string
	// RetryInterval is the pause after a full round of nodes gave no
	// leader (a raft election in progress).
	retry time.Duration

	mu     sync.Mutex
	leader string
	conns  map[string]*remoting.Client
	failed map[string]bool // nodes whose last attempt got no answer: tried last
}

// NewClient returns a client of the controllers at addrs (controllerAddr).
func NewClient(addrs []string) *Client {
	return &Client{addrs: slices.Clone(addrs), retry: 50 * time.Millisecond, conns: map[string]*remoting.Client{}, failed: map[string]bool{}}
}

// Close closes the client's connections.
func (cl *Client) Close() {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	for a, c := range cl.conns {
		c.Close()
		delete(cl.conns, a)
	}
}

// Leader is the leader address the client last followed ("" if none).
func (cl *Client) Leader() string {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	return cl.leader
}

func (cl *Client) conn(ctx context.Context, addr string) (*remoting.Client, error) {
	cl.mu.Lock()
	c := cl.conns[addr]
	cl.mu.Unlock()
	if c != nil {
		select {
		case <-c.Done():
		default:
			return c, nil
		}
	}
	c, err := remoting.Dial(ctx, addr, remoting.ClientConfig{MaxFrameBytes: MaxFrameBytes})
	if err != nil {
		return nil, err
	}
	cl.mu.Lock()
	if old := cl.conns[addr]; old != nil {
		old.Close()
	}
	cl.conns[addr] = c
	cl.mu.Unlock()
	return c, nil
}

func (cl *Client) drop(addr string) {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if c := cl.conns[addr]; c != nil {
		c.Close()
		delete(cl.conns, addr)
	}
	if cl.leader == addr {
		cl.leader = ""
	}
}

// call sends one request to the leader, following redirects and trying
// every node, until an answer other than not-leader or ctx's end.
func (cl *Client) call(ctx context.Context, code int16, ext map[string]string, body, out any) error {
	var b []byte
	if body != nil {
		var err error
		if b, err = json.Marshal(body); err != nil {
			return err
		}
	}
	var last error = errors.New("controller: no controller address")
	for round := 0; ; round++ {
		targets := cl.order()
		for i, addr := range targets {
			err := cl.invokeShare(ctx, len(targets)-i, addr, code, ext, b, out)
			var nl *NotLeaderError
			switch {
			case err == nil:
				return nil
			case errors.As(err, &nl):
				last = err
				if nl.Leader != "" && nl.Leader != addr {
					cl.mu.Lock()
					cl.leader = nl.Leader
					cl.mu.Unlock()
					err := cl.invokeShare(ctx, len(targets)-i, nl.Leader, code, ext, b, out)
					if err == nil || !isRetriable(err) {
						return err
					}
					cl.drop(nl.Leader)
				}
			case isRetriable(err):
				last = err
				cl.drop(addr)
				cl.mu.Lock()
				cl.failed[addr] = true
				cl.mu.Unlock()
			default:
				return err
			}
			if ctx.Err() != nil {
				return fmt.Errorf("%w (last: %v)", ctx.Err(), last)
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), last)
		case <-time.After(cl.retry):
		}
	}
}

// order is the nodes in the order a call tries them: the leader it last
// reached, the others, and last those whose last attempt got no answer.
func (cl *Client) order() []string {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	var first, rest []string
	if cl.leader != "" && !cl.failed[cl.leader] {
		first = append(first, cl.leader)
	}
	for _, a := range cl.addrs {
		switch {
		case a == cl.leader && !cl.failed[a]:
		case cl.failed[a]:
			rest = append(rest, a)
		default:
			first = append(first, a)
		}
	}
	return append(first, rest...)
}

// minShare is the time invokeShare keeps for each node after the one it
// tries (unless ctx has less left).
const minShare = 500 * time.Millisecond

// invokeShare is invoke with a share of what is left of ctx: all of it
// but minShare for each of the n-1 nodes still to try after this one, so
// that a node that accepts connections but never answers (a stopped
// process, a partitioned host) cannot use up a call's whole deadline
// while the others would answer (a broker whose heartbeats all went to a
// silent former leader would be taken for dead by the new one), and a
// leader slow to apply still gets most of it.
func (cl *Client) invokeShare(ctx context.Context, n int, addr string, code int16, ext map[string]string, body []byte, out any) error {
	if dl, ok := ctx.Deadline(); ok && n > 1 {
		share := max(time.Until(dl)-time.Duration(n-1)*minShare, minShare)
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, share)
		defer cancel()
	}
	return cl.invoke(ctx, addr, code, ext, body, out)
}

// isRetriable: not-leader and transport failures are; rejections are not.
func isRetriable(err error) bool {
	var re *RemoteError
	return !errors.As(err, &re) && !errors.Is(err, ErrInvalidCommand)
}

func (cl *Client) invoke(ctx context.Context, addr string, code int16, ext map[string]string, body []byte, out any) error {
	c, err := cl.conn(ctx, addr)
	if err != nil {
		return err
	}
	resp, err := c.Invoke(ctx, remoting.NewRequest(code, ext, body))
	if err != nil {
		return err
	}
	cl.mu.Lock()
	delete(cl.failed, addr) // it answers
	cl.mu.Unlock()
	if resp.Code != remoting.ResSuccess {
		return responseError(resp)
	}
	cl.mu.Lock()
	if code != remoting.ReqControllerStatus {
		cl.leader = addr
	}
	cl.mu.Unlock()
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(resp.Body, out); err != nil {
		return fmt.Errorf("%w: answer of %s: %v", ErrInvalidCommand, addr, err)
	}
	return nil
}

// Register registers a broker's store with the leader.
func (cl *Client) Register(ctx context.Context, req RegisterRequest) (RegisterResponse, error) {
	var out RegisterResponse
	return out, cl.call(ctx, remoting.ReqControllerRegister, nil, req, &out)
}

// Heartbeat reports liveness and returns the group's view.
func (cl *Client) Heartbeat(ctx context.Context, req HeartbeatRequest) (GroupView, error) {
	var out GroupView
	return out, cl.call(ctx, remoting.ReqControllerHeartbeat, nil, req, &out)
}

// AlterInSync proposes the master's new in-sync set.
func (cl *Client) AlterInSync(ctx context.Context, req AlterInSync) (GroupView, error) {
	var out GroupView
	return out, cl.call(ctx, remoting.ReqControllerAlterInSync, nil, req, &out)
}

// GetGroup polls a group's view.
func (cl *Client) GetGroup(ctx context.Context, group string) (GroupView, error) {
	var out GroupView
	return out, cl.call(ctx, remoting.ReqControllerGetGroup, map[string]string{"group": group}, nil, &out)
}

// SetAllowUnclean is the operator's switch for one group.
func (cl *Client) SetAllowUnclean(ctx context.Context, req AllowUnclean) (GroupView, error) {
	var out GroupView
	return out, cl.call(ctx, remoting.ReqControllerAllowUnclean, nil, req, &out)
}

// SwitchOver asks the leader for a graceful switch-over (switchover.go).
func (cl *Client) SwitchOver(ctx context.Context, req SwitchOverRequest) (GroupView, error) {
	var out GroupView
	return out, cl.call(ctx, remoting.ReqControllerSwitchOver, nil, req, &out)
}

// Status asks the leader for its status (any node's, if the leader is not
// reachable: State and Acting say whose it is).
func (cl *Client) Status(ctx context.Context) (Status, error) {
	var first Status
	var firstErr error = errors.New("controller: no controller address")
	addrs := cl.order()
	for i, addr := range addrs {
		var s Status
		if err := cl.invokeShare(ctx, len(addrs)-i, addr, remoting.ReqControllerStatus, nil, nil, &s); err != nil {
			firstErr = err
			if isRetriable(err) {
				cl.mu.Lock()
				cl.failed[addr] = true
				cl.mu.Unlock()
			}
			continue
		}
		if s.Acting {
			return s, nil
		}
		if first.NodeID == "" {
			first = s
		}
		if s.LeaderAddr != "" && s.LeaderAddr != addr {
			var ls Status
			if err := cl.invokeShare(ctx, len(addrs)-i, s.LeaderAddr, remoting.ReqControllerStatus, nil, nil, &ls); err == nil && ls.Acting {
				return ls, nil
			}
		}
	}
	if first.NodeID != "" {
		return first, nil
	}
	return Status{}, firstErr
}

// RemotingBrokers reaches brokers over remoting, one short connection per
// request (elections are rare).
type RemotingBrokers struct{}

func (RemotingBrokers) invoke(ctx context.Context, addr string, code int16, body, out any) error {
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	c, err := remoting.Dial(ctx, addr, remoting.ClientConfig{MaxFrameBytes: MaxFrameBytes})
	if err != nil {
		return err
	}
	defer c.Close()
	resp, err := c.Invoke(ctx, remoting.NewRequest(code, nil, b))
	if err != nil {
		return err
	}
	if resp.Code != remoting.ResSuccess {
		return responseError(resp)
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(resp.Body, out)
}

// Fence sends ReqControllerFence to the replica's broker.
func (b RemotingBrokers) Fence(ctx context.Context, r Replica, req FenceRequest) (FenceResponse, error) {
	var out FenceResponse
	return out, b.invoke(ctx, r.Addr, remoting.ReqControllerFence, req, &out)
}

// RoleChanged sends ReqControllerRoleChanged to the replica's broker.
func (b RemotingBrokers) RoleChanged(ctx context.Context, r Replica, view GroupView) error {
	return b.invoke(ctx, r.Addr, remoting.ReqControllerRoleChanged, view, nil)
}

// BrokerSide is what a broker implements to serve the controller leader's
// requests (doc.go says what each must do). Its methods are called
// concurrently (one connection per request).
type BrokerSide interface {
	Fence(FenceRequest) (FenceResponse, error)
	RoleChanged(GroupView)
}

// ServeBroker answers ReqControllerFence and ReqControllerRoleChanged with
// b (a broker's dispatch table routes those two codes here); it answers
// nil for any other code.
func ServeBroker(b BrokerSide, req *remoting.Command) *remoting.Command {
	switch req.Code {
	case remoting.ReqControllerFence:
		var r FenceRequest
		if err := decodeBody(req, &r); err != nil {
			return errorResponse(req, err)
		}
		resp, err := b.Fence(r)
		if err != nil {
			return errorResponse(req, err)
		}
		return okResponse(req, resp)
	case remoting.ReqControllerRoleChanged:
		var v GroupView
		if err := decodeBody(req, &v); err != nil {
			return errorResponse(req, err)
		}
		b.RoleChanged(v)
		return okResponse(req, struct{}{})
	}
	return nil
}
