// Package config reads broker.conf, the Java .properties file RocketMQ
// brokers are configured with, into a Broker: a plain struct with one Go-typed
// field per supported key and Keel's defaults (Default).
//
// Key names and file units are RocketMQ's, so an existing broker.conf works
// unchanged: durations are integers in the unit RocketMQ uses for that key
// (milliseconds for most, hours for fileReservedTime, seconds for
// duplicationWindowSeconds), sizes are bytes. mapedFileSizeConsumeQueue is
// read in bytes, like RocketMQ (6000000 = 300000 entries of 20 bytes), and
// held as ConsumeQueueSegmentEntries. docs/configuration.md lists every key
// with its default (docs_test.go checks). One default differs from
// RocketMQ's on purpose: flushDiskType is SYNC_FLUSH (RocketMQ's is
// ASYNC_FLUSH), so an acknowledged message is durable.
//
// Loading is in three steps, so command-line flags can sit between the file
// and the checks:
//
//	b, unknown, err := config.Load(path) // syntax and per-value type errors, with line
//	err = b.Set("storePathRootDir", dir)  // flags override the file
//	err = b.Validate()                    // ranges and relations, all problems at once
//
// Unknown keys are never silently ignored: Load returns them (with a hint
// when Keel knows the key or a key differing only in case) and the caller
// warns or, in strict mode, fails. Keys asking for a guarantee Keel does not
// provide (enableDLegerCommitLog=true) are errors.
//
// The package depends only on the standard library; callers convert a Broker
// into the configs of the store and the broker. A Broker is a plain value
// with no internal locking: build it, validate it, then share it read-only.
package config
