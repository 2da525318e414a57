// Package reliability is Keel's standing fault and hostile-input suite. It
// holds tests only: each test states one guarantee of the broker and tries
// to break it from the outside.
//
//   - crashloop_test.go: the real keel binary is killed with SIGKILL and
//     restarted again and again under producers (the official Go client and
//     raw remoting sends) and a consumer; afterwards every acknowledged
//     message must be in the log exactly once, in order, intact (SYNC_FLUSH
//     and ASYNC_FLUSH).
//   - powerloss_test.go: the broker and its store on the crash-simulating
//     vfs.MemFS under sends, retries, delayed messages and offset commits;
//     after each simulated power loss every acknowledged send, every
//     offset reported durable and every scheduled message survives.
//   - diskfault_test.go: ENOSPC and failed writes and fsyncs at every kind
//     of file through vfs.ErrorFS; corruption at rest found by `keel check`
//     and at start.
//   - slow_test.go: stuck readers, half frames, ten thousand held pulls and
//     a flooding producer, with heap bounds and back-pressure.
//   - hostile_test.go and fuzz_test.go: malformed requests to every handler.
//
// Long modes run with KEEL_LONG=1. docs/reliability.md lists each guarantee
// with the test that proves it and the numbers of the last run.
package reliability
