package broker

import (
	"context"
	"errors"
	"strconv"
	"strings"
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
func (listingTxns) List(topic, group string, limit int) core.PendingTransactions {
	return core.PendingTransactions{Total: limit, Pending: []core.PendingTransaction{{Topic: topic, ProducerGroup: group}}}
}

func TestListTransactionsRoutedToEngine(t *testing.T) {
	e := startEnv(t, nil)
	cl := e.dial()
	wantCode(t, cl.invoke(remoting.ReqListTransactions, map[string]string{"topic": "T"}, nil), remoting.ResSystemError)
	e.b.SetTransactions(listingTxns{})
	resp := cl.invoke(remoting.ReqListTransactions, map[string]string{"topic": "T"}, nil)
	wantCode(t, resp, remoting.ResSuccess)
	want := `{"total":1000,"pending":[{"transactionId":"","topic":"T","queueId":0,"producerGroup":"",` +
		`"halfOffset":0,"commitLogOffset":0,"storeTimeMs":0,"ageMs":0,"checks":0}]}`
	if string(resp.Body) != want {
		t.Fatalf("body %s, want %s", resp.Body, want)
	}
	resp = cl.invoke(remoting.ReqListTransactions, map[string]string{"producerGroup": "pg", "limit": "7"}, nil)
	if !strings.Contains(string(resp.Body), `"total":7,`) || !strings.Contains(string(resp.Body), `"producerGroup":"pg"`) {
		t.Fatalf("filtered list %s", resp.Body)
	}
	wantCode(t, cl.invoke(remoting.ReqListTransactions, map[string]string{"limit": "-1"}, nil), remoting.ResSystemError)
}

// TestCheckTransactionRequest: the engine's check-back reaches the
// producer group's connection as a oneway CHECK_TRANSACTION_STATE whose
// header names the half's offsets and ids and whose body is the half as
// stored; without a live producer it is not sent.
func TestCheckTransactionRequest(t *testing.T) {
	e := startEnv(t, nil)
	if e.b.HasProducer("pg") {
		t.Fatal("a producer before any heartbeat")
	}
	half := &message.Message{Topic: "Orders", QueueID: 2, QueueOffset: 11, PhysOffset: 8192, StoreTimestamp: 1700000000123,
		BornHost: e.b.StoreHost(), StoreHost: e.b.StoreHost(), Body: []byte("pay-1"),
		Properties: message.SetProperties("", message.PropUniqKey, "U1", message.PropTransactionCheckTimes, "1")}
	if err := e.b.CheckTransaction("pg", core.TransactionCheck{Half: half, ID: "T1"}); err == nil {
		t.Fatal("check sent without a producer")
	}
	cl := e.dial()
	wantCode(t, cl.invoke(remoting.ReqHeartBeat, nil, []byte(`{"clientID":"c1","producerDataSet":[{"groupName":"pg"}],"consumerDataSet":[]}`)), remoting.ResSuccess)
	if !e.b.HasProducer("pg") {
		t.Fatal("no producer after the heartbeat")
	}
	if err := e.b.CheckTransaction("pg", core.TransactionCheck{Half: half, ID: "T1"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the check-back", func() bool { return cl.countReceived(remoting.ReqCheckTransactionState) == 1 })
	cl.mu.Lock()
	req := cl.in[len(cl.in)-1]
	cl.mu.Unlock()
	want := map[string]string{"tranStateTableOffset": "11", "commitLogOffset": "8192", "msgId": "U1", "transactionId": "T1",
		"offsetMsgId": message.OffsetMsgID(e.b.StoreHost(), 8192), "topic": "Orders", "bname": e.cfg.BrokerName}
	for k, v := range want {
		if req.Ext(k) != v {
			t.Errorf("%s = %q, want %q", k, req.Ext(k), v)
		}
	}
	if !req.IsOneway() {
		t.Error("check-back not oneway")
	}
	m, err := message.Decode(req.Body)
	if err != nil {
		t.Fatal(err)
	}
	if m.Topic != "Orders" || m.QueueID != 2 || m.QueueOffset != 11 || m.PhysOffset != 8192 || string(m.Body) != "pay-1" ||
		m.Properties != half.Properties {
		t.Fatalf("check-back body %+v", m)
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
