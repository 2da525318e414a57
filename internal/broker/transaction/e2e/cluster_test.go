package e2e

import (
	"os"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/rlog"

	"github.com/keelmq/keel/internal/broker/transaction"
	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/store"
	"github.com/keelmq/keel/internal/testcluster"
)

func TestMain(m *testing.M) {
	rlog.SetLogLevel("fatal")
	os.Exit(m.Run())
}

// cluster is a NameServer and one broker with the transaction engine, on
// a MemFS under SYNC_FLUSH.
type cluster struct {
	*testcluster.Cluster
	t *testing.T
}

func startCluster(t *testing.T, mut func(*transaction.Config)) *cluster {
	t.Helper()
	if raceEnabled {
		t.Skip("the Go client races internally (see race_on_test.go)")
	}
	tc := testcluster.Start(t, testcluster.WithMemFS(), testcluster.WithFlush(store.SyncFlush),
		testcluster.WithStoreConfig(func(c *store.Config) {
			c.MaxMessageBytes = 1 << 20
			c.IndexHashSlots, c.IndexMaxEntries = 4096, 100000
			c.FlushConsumeQueueInterval = 50 * time.Millisecond
		}),
		testcluster.WithTransactions(func(c *transaction.Config) {
			c.CheckInterval, c.Timeout, c.CheckMax = 100*time.Millisecond, 300*time.Millisecond, 15
			if mut != nil {
				mut(c)
			}
		}))
	return &cluster{Cluster: tc, t: t}
}

func (c *cluster) createTopic(topic string, queues int) {
	c.t.Helper()
	if _, err := c.Broker().EnsureTopic(topic, int32(queues), 6); err != nil {
		c.t.Fatalf("create topic %s: %v", topic, err)
	}
	c.WaitRoute(topic)
}

func (c *cluster) nsAddrs() primitive.NamesrvAddr { return primitive.NamesrvAddr(c.NamesrvAddrs()) }

// stored returns how many records of topic (all queues) carry each body,
// read straight from the store.
func (c *cluster) stored(topic string) map[string]int {
	c.t.Helper()
	out := map[string]int{}
	st := c.Store()
	for _, q := range st.Queues(topic) {
		for off := st.MinOffset(topic, q); off < st.MaxOffset(topic, q); {
			r, err := st.GetMessage(topic, q, off, 256, 4<<20, nil)
			if err != nil {
				c.t.Fatal(err)
			}
			for _, rec := range r.Records {
				out[string(message.View(rec).Body())]++
			}
			off = r.NextOffset
			r.Release()
		}
	}
	return out
}
