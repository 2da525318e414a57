package broker

import (
	"context"
	"testing"

	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/remoting"
	"github.com/keelmq/keel/internal/store"
)

type listingTxns struct{}

func (listingTxns) Prepare(context.Context, *message.Message) store.PutResult {
	return store.PutResult{Status: store.PutServiceNotAvailable}
}
func (listingTxns) End(context.Context, *remoting.Conn, *remoting.Command) *remoting.Command {
	return nil
}
func (listingTxns) HandleList(_ context.Context, _ *remoting.Conn, req *remoting.Command) *remoting.Command {
	resp := req.NewResponse(remoting.ResSuccess, "")
	resp.Body = []byte(`{"topic":"` + req.Ext("topic") + `"}`)
	return resp
}

func TestListTransactionsRoutedToEngine(t *testing.T) {
	e := startEnv(t, nil)
	cl := e.dial()
	wantCode(t, cl.invoke(remoting.ReqListTransactions, map[string]string{"topic": "T"}, nil), remoting.ResSystemError)
	e.b.SetTransactions(listingTxns{})
	resp := cl.invoke(remoting.ReqListTransactions, map[string]string{"topic": "T"}, nil)
	wantCode(t, resp, remoting.ResSuccess)
	if string(resp.Body) != `{"topic":"T"}` {
		t.Fatalf("body %q", resp.Body)
	}
}
