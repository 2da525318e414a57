package main

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	rocketmq "github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	"github.com/apache/rocketmq-client-go/v2/rlog"

	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/remoting"
)

// answer is a TransactionListener whose local transactions are unknown
// until commit is set.
type answer struct{ commit atomic.Bool }

func (a *answer) ExecuteLocalTransaction(*primitive.Message) primitive.LocalTransactionState {
	return primitive.UnkonwnState
}

func (a *answer) CheckLocalTransaction(*primitive.MessageExt) primitive.LocalTransactionState {
	if a.commit.Load() {
		return primitive.CommitMessageState
	}
	return primitive.UnkonwnState
}

func TestServeTransactionsAndTxnList(t *testing.T) {
	rlog.SetLogLevel("fatal")
	c := startServe(t, "brokerName=broker-a\nflushDiskType=SYNC_FLUSH\nmapedFileSizeCommitLog=16777216\n"+
		"transactionTimeOut=300\ntransactionCheckInterval=200\n")
	topic := fmt.Sprintf("TxnServe%d", time.Now().UnixNano()%1e9)
	c.ok("topic", "create", topic)
	l := &answer{}
	p, err := rocketmq.NewTransactionProducer(l, producer.WithNameServer([]string{c.namesrv}),
		producer.WithGroupName("txn-serve-pg"), producer.WithInstanceName("txn-serve-p"))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	defer p.Shutdown()
	if _, err := p.SendMessageInTransaction(context.Background(), primitive.NewMessage(topic, []byte("t1"))); err != nil {
		t.Fatal(err)
	}
	out := c.eventually(topic+`\s+\d+\s+txn-serve-pg\s+\S+\s+\d+\s+\S+\s+[1-9]`, "txn", "list", "--topic", topic)
	wantMatch(t, "txn list", out, `BROKER\s+TOPIC\s+QUEUE\s+PRODUCER_GROUP\s+TRANSACTION_ID\s+HALF_OFFSET\s+AGE\s+CHECKS`)
	// A check-back re-puts the half message and then records that the old
	// one is superseded: in between, both are listed. Wait for the record.
	var js []brokerPending
	waitFor(t, "one pending half message in txn list -o json", 30*time.Second, func() bool {
		js = nil
		c.okJSON(&js, "txn", "list", "--group", "txn-serve-pg")
		return len(js) == 1 && js[0].Total == 1
	})
	if p := js[0].Pending[0]; p.Topic != topic || p.Checks < 1 {
		t.Fatalf("txn list -o json: %+v", js)
	}
	l.commit.Store(true)
	waitFor(t, "the transaction to be committed", 30*time.Second, func() bool {
		var js []brokerPending
		c.okJSON(&js, "txn", "list", "--topic", topic)
		return len(js) == 1 && js[0].Total == 0
	})
	out = c.ok("msg", "tail", "--topic", topic, "--from-beginning", "--count", "1")
	wantMatch(t, "tail", out, `t1`)
}

// A producer retry (same UNIQ_KEY) through `keel serve` is stored once:
// de-duplication is on by default (duplicationWindowSeconds=120).
func TestServeDeduplicatesRetries(t *testing.T) {
	c := startServe(t, "brokerName=broker-a\nmapedFileSizeCommitLog=16777216\n")
	cl := c.dialBroker()
	props := message.EncodeProperties(map[string]string{message.PropUniqKey: "7F0000010000000000000000000000AA"})
	send := func() *remoting.Command {
		return c.rpc(cl, remoting.ReqSendMessage, map[string]string{"producerGroup": "pg", "topic": "DedupServe",
			"defaultTopic": "TBW102", "defaultTopicQueueNums": "4", "queueId": "0", "sysFlag": "0",
			"bornTimestamp": "1", "flag": "0", "properties": props, "reconsumeTimes": "0"}, []byte("once"))
	}
	a, b := send(), send()
	if a.Ext("msgId") == "" || a.Ext("msgId") != b.Ext("msgId") || a.Ext("queueOffset") != b.Ext("queueOffset") {
		t.Fatalf("retry answered differently: %v / %v", a.ExtFields, b.ExtFields)
	}
}
