package broker

import (
	"context"
	"errors"
	"strconv"
	"testing"

	"github.com/keelmq/keel/internal/core"
	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/remoting"
	"github.com/keelmq/keel/internal/store"
)

type listingTxns struct{}

func (listingTxns) Prepare(context.Context, *message.Message) store.PutResult {
	return store.PutResult{Status: store.PutServiceNotAvailable}
}
func (listingTxns) End(context.Context, core.EndTransaction) (store.PutStatus, string, error) {
	return store.PutUnknownError, "", nil
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

// endingTxns records the decisions it is handed and answers with status,
// remark and err.
type endingTxns struct {
	listingTxns
	got    []core.EndTransaction
	status store.PutStatus
	remark string
	err    error
}

func (t *endingTxns) End(_ context.Context, d core.EndTransaction) (store.PutStatus, string, error) {
	t.got = append(t.got, d)
	return t.status, t.remark, t.err
}

// TestEndTransactionRequest: the broker parses END_TRANSACTION, hands
// commits and rollbacks to the engine, answers UNKNOWN with nothing and
// anything else with SYSTEM_ERROR, and answers the engine's put status
// with its response code.
func TestEndTransactionRequest(t *testing.T) {
	e := startEnv(t, nil)
	ctx := context.Background()
	end := func(ext map[string]string) *remoting.Command {
		return e.b.handle(ctx, nil, remoting.NewRequest(remoting.ReqEndTransaction, ext, nil))
	}
	hdr := func(decision int) map[string]string {
		return map[string]string{"producerGroup": "pg", "tranStateTableOffset": "7", "commitLogOffset": "4096",
			"commitOrRollback": strconv.Itoa(decision), "fromTransactionCheck": "false", "msgId": "x", "transactionId": "x"}
	}
	if resp := end(hdr(8)); resp.Code != remoting.ResSystemError {
		t.Fatalf("without an engine: %d %q", resp.Code, resp.Remark)
	}
	txns := &endingTxns{status: store.PutOK}
	e.b.SetTransactions(txns)
	if resp := end(hdr(8)); resp.Code != remoting.ResSuccess {
		t.Fatalf("commit: %d %q", resp.Code, resp.Remark)
	}
	if resp := end(hdr(12)); resp.Code != remoting.ResSuccess {
		t.Fatalf("rollback: %d %q", resp.Code, resp.Remark)
	}
	want := []core.EndTransaction{{ProducerGroup: "pg", CommitLogOffset: 4096, QueueOffset: 7, Commit: true},
		{ProducerGroup: "pg", CommitLogOffset: 4096, QueueOffset: 7, Commit: false}}
	if len(txns.got) != 2 || txns.got[0] != want[0] || txns.got[1] != want[1] {
		t.Fatalf("engine got %+v, want %+v", txns.got, want)
	}
	if resp := end(hdr(0)); resp != nil {
		t.Fatalf("UNKNOWN answered: %d %q", resp.Code, resp.Remark)
	}
	bad := hdr(8)
	bad["commitLogOffset"] = "x"
	for name, ext := range map[string]map[string]string{"illegal decision": hdr(5), "bad offset": bad,
		"no decision": {"producerGroup": "pg"}} {
		if resp := end(ext); resp.Code != remoting.ResSystemError {
			t.Errorf("%s: %d %q", name, resp.Code, resp.Remark)
		}
	}
	if len(txns.got) != 2 {
		t.Fatalf("engine asked %d times, want 2", len(txns.got))
	}
	txns.status, txns.remark = store.PutDiskFull, "write the rollback record: DISK_FULL"
	if resp := end(hdr(12)); resp.Code != remoting.ResServiceNotAvailable || resp.Remark != txns.remark {
		t.Fatalf("failed write: %d %q", resp.Code, resp.Remark)
	}
	txns.err = core.Errorf(core.ErrInternal, "the producer group %q differs", "pg")
	if resp := end(hdr(8)); resp.Code != remoting.ResSystemError || resp.Remark != `the producer group "pg" differs` {
		t.Fatalf("refused: %d %q", resp.Code, resp.Remark)
	}
	txns.err = errors.New("not a core error")
	if resp := end(hdr(8)); resp.Code != remoting.ResSystemError {
		t.Fatalf("operating error: %d %q", resp.Code, resp.Remark)
	}
}
