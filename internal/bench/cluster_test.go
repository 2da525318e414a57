package bench

import (
	"testing"

	"github.com/keelmq/keel/internal/store"
	"github.com/keelmq/keel/internal/testcluster"
)

// startCluster starts a NameServer, a store and a broker in this process on
// loopback ports, stopped by tb.Cleanup; segments and index are sized for
// benchmark volumes.
func startCluster(tb testing.TB, flush store.FlushDiskType) *testcluster.Cluster {
	tb.Helper()
	return testcluster.Start(tb, testcluster.WithFlush(flush), testcluster.WithStoreConfig(func(c *store.Config) {
		c.CommitLogSegmentBytes = 256 << 20
		c.IndexHashSlots, c.IndexMaxEntries = 100000, 400000
	}))
}
