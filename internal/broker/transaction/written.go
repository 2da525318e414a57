package transaction

import "github.com/keelmq/keel/internal/store"

// written reports whether a put with this status is in the CommitLog: PutOK,
// or a put that timed out waiting for the local fdatasync
// (PutFlushDiskTimeout) or for a SYNC_MASTER's replicas
// (PutFlushSlaveTimeout). Such a record reaches the disk and the replicas
// without help, so it is registered as written and never put again: a
// second put would be a second copy (a half checked twice, a second
// CheckMax copy, a committed message delivered twice).
func written(s store.PutStatus) bool {
	return s == store.PutOK || s == store.PutFlushDiskTimeout || s == store.PutFlushSlaveTimeout
}
