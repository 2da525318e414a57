// Package e2e drives an in-process NameServer and Broker with the official
// RocketMQ Go client (github.com/apache/rocketmq-client-go/v2), exactly as an
// application does. Every test is bounded by deadlines; waits poll for
// conditions.
package e2e

import (
	"os"
	"testing"

	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/rlog"

	"github.com/keelmq/keel/internal/remoting"
	"github.com/keelmq/keel/internal/store"
	"github.com/keelmq/keel/internal/testcluster"
)

func TestMain(m *testing.M) {
	rlog.SetLogLevel("error")
	os.Exit(m.Run())
}

// cluster is a NameServer and one broker on free loopback ports.
type cluster struct {
	*testcluster.Cluster
	t *testing.T
}

func startCluster(t *testing.T, storeMutate ...func(*store.Config)) *cluster {
	t.Helper()
	tc := testcluster.Start(t, testcluster.WithStoreConfig(func(c *store.Config) {
		c.CommitLogSegmentBytes = 64 << 20
		for _, f := range storeMutate {
			f(c)
		}
	}))
	return &cluster{Cluster: tc, t: t}
}

// invoke sends one request to addr with a throw-away remoting client.
func (c *cluster) invoke(addr string, code int16, ext map[string]string) *remoting.Command {
	c.t.Helper()
	resp, err := testcluster.Invoke(addr, nil, remoting.NewRequest(code, ext, nil))
	if err != nil {
		c.t.Fatalf("invoke %d at %s: %v", code, addr, err)
	}
	return resp
}

func (c *cluster) nsAddrs() primitive.NamesrvAddr { return primitive.NamesrvAddr(c.NamesrvAddrs()) }

func skipUnderRace(t *testing.T) {
	if raceEnabled {
		t.Skip("the Go client races internally here (see race_on_test.go)")
	}
}
