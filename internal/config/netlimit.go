package config

// Defaults of the network bounds, sized for a small machine (2 cores,
// 24 GiB): the request budget holds sixteen maximal (16 MiB) frames, and
// six listeners at their connection limit stay well inside the file
// descriptors Go raises the soft limit to.
const (
	DefaultMaxInFlightRequestBytes  = 256 << 20
	DefaultMaxConnections           = 4096
	DefaultMaxConnectionsPerAddress = 1024
)

// validateNetLimits checks the request budget and the connection limits.
func (b *Broker) validateNetLimits(bad func(string, string, ...any)) {
	if b.MaxInFlightRequestBytes < int64(b.MaxFrameBytes) {
		bad("maxInFlightRequestBytes", "must be at least maxFrameBytes (%d): a frame of that size could never be read", b.MaxFrameBytes)
	}
	if b.MaxConnections < 1 {
		bad("maxConnections", "must be at least 1")
	}
	if b.MaxConnectionsPerAddress < 1 || b.MaxConnectionsPerAddress > b.MaxConnections {
		bad("maxConnectionsPerAddress", "must be between 1 and maxConnections (%d)", b.MaxConnections)
	}
}
