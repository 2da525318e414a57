package acl

import (
	"context"
	"testing"

	"github.com/keelmq/keel/internal/remoting"
)

type borrowing struct{ remoting.HandlerFunc }

func (borrowing) BorrowsBody(code int16) bool { return code == remoting.ReqSendMessageV2 }

// TestWrapBorrowsWhatItWraps: the authorizer only reads requests, so the
// wrapped handler's promise about request bodies holds for the wrapper.
func TestWrapBorrowsWhatItWraps(t *testing.T) {
	noop := remoting.HandlerFunc(func(context.Context, *remoting.Conn, *remoting.Command) *remoting.Command { return nil })
	a := &Authorizer{}
	if w := Wrap(borrowing{noop}, a); !remoting.BorrowsBody(w, remoting.ReqSendMessageV2) || remoting.BorrowsBody(w, remoting.ReqPullMessage) {
		t.Fatal("a wrapped borrowing handler: borrows must follow the inner handler, code by code")
	}
	if w := Wrap(noop, a); remoting.BorrowsBody(w, remoting.ReqSendMessageV2) {
		t.Fatal("a wrapped plain handler must not borrow")
	}
}
