// Package testcluster starts an in-process Keel cluster for tests: a
// NameServer and one broker (store, and optionally scheduled delivery, the
// transaction engine and producer de-duplication) on free loopback ports,
// stopped by t.Cleanup.
//
// It is an ordinary package only so that the end-to-end tests of several
// packages can share one harness; it is meant for _test.go files alone
// (internal/archtest forbids importing it from non-test code).
//
//	c := testcluster.Start(t, testcluster.WithMemFS(), testcluster.WithScheduler(levels))
//	c.CreateTopic("T", 4)
//	... clients dial c.NamesrvAddrs() ...
//	c.Restart() // clean stop and start on the same address and data
//	c.Kill()    // kill -9 + power loss (MemFS only), then start again
//
// Options wrap the broker's handler (an ACL check: WithHandler) and its
// listeners (TLS: WithBrokerListener), and choose a data directory or
// MemFS. It imports only broker (with its engines), namesrv, remoting,
// store and vfs.
//
// Concurrency: a Cluster is driven by one test goroutine; its accessors
// (Store, Broker, ...) return the components of the broker currently
// running, which change on Restart and Kill.
package testcluster
