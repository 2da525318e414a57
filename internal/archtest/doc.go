// Package archtest holds no code, only tests that enforce Keel's
// architecture invariants on the module's source (ARCHITECTURE.md lists
// them): which packages may import which, where third-party modules may be
// used, that every package has a package comment, and that every file is
// gofmt'ed.
//
// The tests parse the source with go/parser instead of running the go tool,
// so they are fast and see every file regardless of build tags.
package archtest
