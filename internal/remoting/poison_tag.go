//go:build keelpoison

package remoting

// Built with -tags keelpoison (test runs of other packages, e.g.
// `go test -tags keelpoison ./cmd/keel ./internal/broker/...`), every
// released frame buffer is poisoned: see PoisonReleasedFrames.
func init() { PoisonReleasedFrames(true) }
