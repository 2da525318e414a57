package store

// PutStatus is the outcome of a put (RocketMQ's PutMessageStatus).
type PutStatus int

// Put statuses.
const (
	PutOK PutStatus = iota
	// PutFlushDiskTimeout: SYNC_FLUSH did not complete within
	// SyncFlushTimeout. The message is written and may still become durable;
	// it is not acknowledged as durable.
	PutFlushDiskTimeout
	// PutServiceNotAvailable: the store is closed or read-only after a write
	// or fsync failure.
	PutServiceNotAvailable
	// PutDiskFull: disk use is above DiskHardLimitRatio (ErrDiskFull), or
	// the CommitLog write found the disk full (ErrNoSpace). Nothing was
	// written; later puts are accepted again when space returns.
	PutDiskFull
	// PutMessageIllegal: the message is malformed or too large.
	PutMessageIllegal
	// PutPropertiesTooLong: the properties exceed message.MaxPropertiesBytes.
	PutPropertiesTooLong
	// PutUnknownError: anything else, such as a cancelled context while
	// waiting for the flush (the message is written but not acknowledged).
	PutUnknownError
	// PutFlushSlaveTimeout: with Config.ExternalReplication, the replicas
	// did not confirm the message within ReplicationTimeout although it is
	// durable locally as the flush mode demands. It is written and may
	// still be replicated; it is not acknowledged.
	PutFlushSlaveTimeout
	// PutInSyncReplicasNotEnough: refused before anything was stored,
	// because fewer replicas are in sync than the replication mode needs
	// (returned by the replication service's send check, not by a put).
	PutInSyncReplicasNotEnough
)

var putStatusNames = [...]string{"PUT_OK", "FLUSH_DISK_TIMEOUT", "SERVICE_NOT_AVAILABLE", "DISK_FULL", "MESSAGE_ILLEGAL", "PROPERTIES_SIZE_EXCEEDED", "UNKNOWN_ERROR", "FLUSH_SLAVE_TIMEOUT", "IN_SYNC_REPLICAS_NOT_ENOUGH"}

func (s PutStatus) String() string {
	if s >= 0 && int(s) < len(putStatusNames) {
		return putStatusNames[s]
	}
	return "UNKNOWN_ERROR"
}

// PutResult is the result of PutMessage and PutMessages. Err explains every
// status but PutOK.
type PutResult struct {
	Status PutStatus
	Err    error
}

// OK reports whether the put was acknowledged.
func (r PutResult) OK() bool { return r.Status == PutOK }

// GetStatus is the outcome of GetMessage (RocketMQ's GetMessageStatus).
type GetStatus int

// Get statuses; see GetMessage for when each applies.
const (
	Found GetStatus = iota
	NoMatchedMessage
	MessageWasRemoving
	OffsetOverflowOne
	OffsetOverflowBadly
	OffsetTooSmall
	NoMatchedLogicQueue
	NoMessageInQueue
)

var getStatusNames = [...]string{"FOUND", "NO_MATCHED_MESSAGE", "MESSAGE_WAS_REMOVING", "OFFSET_OVERFLOW_ONE", "OFFSET_OVERFLOW_BADLY", "OFFSET_TOO_SMALL", "NO_MATCHED_LOGIC_QUEUE", "NO_MESSAGE_IN_QUEUE"}

func (s GetStatus) String() string {
	if s >= 0 && int(s) < len(getStatusNames) {
		return getStatusNames[s]
	}
	return "UNKNOWN"
}
