package main

import (
	"context"
	"testing"

	"github.com/keelmq/keel/internal/remoting"
)

// sendOnly borrows the body of, and runs inline, ReqSendMessage only.
type sendOnly struct{}

func (sendOnly) Handle(context.Context, *remoting.Conn, *remoting.Command) *remoting.Command {
	return nil
}
func (sendOnly) BorrowsBody(code int16) bool           { return code == remoting.ReqSendMessage }
func (sendOnly) RunsInline(req *remoting.Command) bool { return req.Code == remoting.ReqSendMessage }

// TestLateHandlerForwardsOptionalInterfaces: the broker server's handler,
// set after the server is made, keeps what the broker's handler offers to
// remoting (frame reuse, inline sends); a handler without them (the ACL
// wrapper) gets neither.
func TestLateHandlerForwardsOptionalInterfaces(t *testing.T) {
	var h remoting.Handler = sendOnly{}
	late := lateHandler{&h}
	send, pull := remoting.NewRequest(remoting.ReqSendMessage, nil, nil), remoting.NewRequest(remoting.ReqPullMessage, nil, nil)
	if !remoting.BorrowsBody(late, send.Code) || remoting.BorrowsBody(late, pull.Code) {
		t.Fatal("BorrowsBody not forwarded")
	}
	if !remoting.RunsInline(late, send) || remoting.RunsInline(late, pull) {
		t.Fatal("RunsInline not forwarded")
	}
	h = remoting.HandlerFunc(func(context.Context, *remoting.Conn, *remoting.Command) *remoting.Command { return nil })
	if remoting.BorrowsBody(late, send.Code) || remoting.RunsInline(late, send) {
		t.Fatal("a plain handler borrows or runs inline through lateHandler")
	}
}
