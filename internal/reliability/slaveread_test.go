package reliability

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"

	"github.com/keelmq/keel/internal/remoting"
)

// TestConsumersGoOnFromTheSlaveWhileTheMasterIsDown: a NameServer, a
// SYNC_MASTER and its SLAVE as processes. The official Go client
// produces to the master and a push consumer reads part of the topic
// from it; the master is killed with SIGKILL; the consumer goes on
// reading the rest from the slave (the master has left the route, and the
// client falls back to brokerId 1). An offset committed on the slave
// meanwhile (as RocketMQ's Java client does when the master is away; the
// Go client keeps its commits in memory for the master) reaches the
// master when it is back, over the replication link, and the topic and
// group configuration the consumer needed were on the slave because they
// travel with the log.
func TestConsumersGoOnFromTheSlaveWhileTheMasterIsDown(t *testing.T) {
	const (
		topic = "SR"
		group = "cg-slave-read"
		total = 40
		gate  = 10 // messages consumed while the master is up
	)
	g := startReadGroup(t)
	waitFor(t, 30*time.Second, "master and slave registered", func() bool {
		resp, err := invoke(g.nsAddr, remoting.ReqGetBrokerClusterInfo, nil, nil)
		return err == nil && resp.Code == remoting.ResSuccess &&
			regexp.MustCompile(`"0":"`+regexp.QuoteMeta(g.masterAddr)+`"`).Match(resp.Body) &&
			regexp.MustCompile(`"1":"`+regexp.QuoteMeta(g.slaveAddr)+`"`).Match(resp.Body)
	})
	waitFor(t, 30*time.Second, "the master to accept sends (the slave in sync)", func() bool {
		resp, err := invoke(g.masterAddr, remoting.ReqUpdateAndCreateTopic,
			map[string]string{"topic": topic, "readQueueNums": "1", "writeQueueNums": "1", "perm": "6"}, nil)
		return err == nil && resp.Code == remoting.ResSuccess
	})
	// The topic's configuration reaches the slave as a system record.
	waitFor(t, 30*time.Second, "the topic on the slave", func() bool {
		resp, err := invoke(g.slaveAddr, remoting.ReqGetAllTopicConfig, nil, nil)
		return err == nil && resp.Code == remoting.ResSuccess && regexp.MustCompile(`"`+topic+`"`).Match(resp.Body)
	})

	p, err := producer.NewDefaultProducer(producer.WithNameServer(primitive.NamesrvAddr{g.nsAddr}),
		producer.WithGroupName("pg-slave-read"), producer.WithInstanceName(fmt.Sprintf("p-%d", time.Now().UnixNano())),
		producer.WithSendMsgTimeout(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	for i := range total {
		var res *primitive.SendResult
		ok := poll(30*time.Second, func() bool {
			res, err = p.SendSync(context.Background(), primitive.NewMessage(topic, []byte(fmt.Sprintf("m-%d", i))))
			return err == nil && res.Status == primitive.SendOK
		})
		if !ok {
			t.Fatalf("send %d: %v %v", i, res, err)
		}
	}
	p.Shutdown()

	var mu sync.Mutex
	seen := map[string]int{}
	afterKill := 0
	killed := false
	release := make(chan struct{})
	c, err := consumer.NewPushConsumer(consumer.WithNameServer(primitive.NamesrvAddr{g.nsAddr}),
		consumer.WithGroupName(group), consumer.WithInstance(fmt.Sprintf("c-%d", time.Now().UnixNano())),
		consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset), consumer.WithConsumerModel(consumer.Clustering),
		// One message a pull and at most one or two cached: what the
		// consumer reads after the kill it must pull from the slave.
		consumer.WithPullBatchSize(1), consumer.WithPullThresholdForQueue(1), consumer.WithConsumeGoroutineNums(1))
	if err != nil {
		t.Fatal(err)
	}
	err = c.Subscribe(topic, consumer.MessageSelector{}, func(_ context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
		for _, m := range msgs {
			mu.Lock()
			seen[string(m.Body)]++
			n := len(seen)
			if killed {
				afterKill++
			}
			mu.Unlock()
			if n == gate {
				<-release // hold the consumer until the master is gone
			}
		}
		return consumer.ConsumeSuccess, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	defer c.Shutdown()
	waitFor(t, 30*time.Second, "the first messages from the master", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(seen) >= gate
	})

	g.master.signal(syscall.SIGKILL)
	mu.Lock()
	killed = true
	mu.Unlock()
	close(release)
	waitFor(t, 45*time.Second, "every message, the rest from the slave", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(seen) == total
	})
	mu.Lock()
	if afterKill < total-gate-3 {
		t.Errorf("only %d messages consumed after the master died; the slave served too few", afterKill)
	}
	for i := range total {
		if seen[fmt.Sprintf("m-%d", i)] == 0 {
			t.Errorf("message m-%d never consumed", i)
		}
	}
	mu.Unlock()

	// An offset committed on the slave while the master is down.
	resp, err := invoke(g.slaveAddr, remoting.ReqUpdateConsumerOffset,
		map[string]string{"consumerGroup": group, "topic": topic, "queueId": "0", "commitOffset": strconv.Itoa(total)}, nil)
	if err != nil || resp.Code != remoting.ResSuccess {
		t.Fatalf("commit on the slave: %v %v", resp, err)
	}
	c.Shutdown() // its own commits go to the master, which is down

	g.restartReadMaster(t)
	waitFor(t, 30*time.Second, "the slave's offset on the master", func() bool {
		resp, err := invoke(g.masterAddr, remoting.ReqQueryConsumerOffset,
			map[string]string{"consumerGroup": group, "topic": topic, "queueId": "0", "setZeroIfNotFound": "false"}, nil)
		return err == nil && resp.Code == remoting.ResSuccess && resp.ExtFields["offset"] == strconv.Itoa(total)
	})
}

// startReadGroup is startGroup with the Kafka listener off too and
// addresses kept for a restart of the master.
func startReadGroup(t *testing.T) *group {
	g := &group{}
	g.ns = startProc(t, "namesrv", "namesrv", "--namesrv-listen", "127.0.0.1:0")
	g.nsAddr = g.ns.await(nsListenRE)
	common := "brokerClusterName=c\nbrokerName=broker-a\nflushDiskType=SYNC_FLUSH\nmapedFileSizeCommitLog=16777216\n" +
		"minInSyncReplicas=2\nreplicaAckTimeoutMillis=1000\n"
	dir := t.TempDir()
	g.masterConf = filepath.Join(dir, "master.conf")
	os.WriteFile(g.masterConf, []byte(common+"brokerRole=SYNC_MASTER\nbrokerId=0\n"), 0o600)
	g.masterDir = filepath.Join(dir, "master")
	g.master = startProc(t, "master", "broker", "-n", g.nsAddr, "-c", g.masterConf, "--data-dir", g.masterDir,
		"--broker-listen", "127.0.0.1:0", "--ha-listen", "127.0.0.1:0", "--http-listen", "", "--kafka-listen", "")
	g.haAddr = g.master.await(haListenRE)
	g.masterAddr = g.master.await(brListenRE)
	g.slaveConf = filepath.Join(dir, "slave.conf")
	os.WriteFile(g.slaveConf, []byte(common+"brokerRole=SLAVE\nbrokerId=1\nhaMasterAddress="+g.haAddr+"\n"), 0o600)
	g.slaveDir = filepath.Join(dir, "slave")
	g.slave = startProc(t, "slave", "broker", "-n", g.nsAddr, "-c", g.slaveConf, "--data-dir", g.slaveDir,
		"--broker-listen", "127.0.0.1:0", "--http-listen", "", "--kafka-listen", "")
	g.slaveAddr = g.slave.await(brListenRE)
	return g
}

// restartReadMaster starts the master again on its data directory and
// addresses.
func (g *group) restartReadMaster(t *testing.T) {
	var last *proc
	ok := poll(30*time.Second, func() bool {
		last = startProc(t, "master-2", "broker", "-n", g.nsAddr, "-c", g.masterConf, "--data-dir", g.masterDir,
			"--broker-listen", g.masterAddr, "--ha-listen", g.haAddr, "--http-listen", "", "--kafka-listen", "")
		if poll(10*time.Second, func() bool { return haListenRE.MatchString(last.logs()) }) {
			return true
		}
		last.signal(syscall.SIGKILL) // a port not free yet: try again
		return false
	})
	if !ok {
		t.Fatalf("the master did not start again:\n%s", tail(last.logs(), 4000))
	}
	g.master = last
}
