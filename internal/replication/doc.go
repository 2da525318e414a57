// Package replication copies a master broker's CommitLog to its slaves
// (RocketMQ's master–slave broker groups, docs/replication.md).
//
// A slave dials its master's HA port and sends HELLO: its broker name and
// id, its CommitLog segment size, its log end and its epoch history. The
// master checks that the slave's log is a prefix of its own
// (CheckDivergence), answers HELLO_OK with its epoch history, and streams
// DATA frames: raw CommitLog ranges (whole entries with their CRC
// trailers, the blank marker closing a segment) from the slave's log end
// on, never across a segment or an epoch boundary, with heartbeats when
// idle. The slave verifies every record (store.AppendReplicated: size,
// CRC, type, structure, own offset) before a byte is written, appends at
// exactly its log end, and sends ACK frames (written and flushed ends)
// from a goroutine of its own so that its fdatasync overlaps the next
// range. The store's dispatcher rebuilds the slave's ConsumeQueues and
// index from the replicated log. A replica whose disk is full (its store
// admits replicated ranges against the measured free space) refuses the
// range with nothing written, ends the connection and does not dial again
// until its store has room (space.go), so its master does not wait for it.
//
// The master counts bytes as sent before it writes them to a replica's
// connection: the replica may acknowledge them before Write returns, and
// an ack above "sent" ends the connection. A slave answers every
// heartbeat with an ack, even an unchanged one: the master reads acks with
// the idle timeout, and an idle group would otherwise lose its slave from
// the in-sync set every few heartbeats. Catch-up is paced (pacing.go): the
// master sends a replica at most MaxInFlightBytes beyond what it
// acknowledged receiving, so a replica far behind catches up at the pace
// it writes. An empty replica starts at the master's oldest segment
// (logstart.go, store.StartReplicaAt). A slave without haMasterAddress
// takes its master's HA address from the NameServers' answer to its
// registration (masteraddr.go, SetMasterAddr); a new address ends the
// session with the old master.
//
// Authentication (auth.go): before HELLO, a connection may be TLS
// (MasterConfig.TLS, SlaveConfig.TLS) and, with a shared Secret, runs a
// challenge–response (AUTH, CHALLENGE, PROOF, AUTH_OK: HMAC-SHA256 over a
// nonce of each side and the TLS session's keying material) in which the
// replica proves itself first and the master then; either end refuses a
// peer that fails, before any byte of the log, epoch history or log end
// is sent. Until then the master bounds frames (maxAuthFrameBytes), time
// (AuthTimeout) and connections (maxPendingAuth), and rate-limits its log
// lines about refused peers.
//
// Frames (frame.go): len u32 | type u8 | payload | crc32c u32. A frame
// that is too long, of an unknown type, with a bad CRC or a payload that
// does not decode closes the connection.
//
// Offsets (offsets.go): a replica reports the consumer offsets committed
// on it (its master was away) in OFFSETS frames, at every session start
// and while it streams; the master hands them to OnReplicaOffsets.
//
// Epochs (epochs.go): every start of a master appends (epoch, log end) to
// its epoch history; a slave appends an epoch when the first range of it
// arrives, before writing it. Both keep the history in
// <dataDir>/replication/epochs, written durably (temporary file, fsync,
// rename, directory fsync); an I/O error there is fatal. A slave whose log
// holds bytes the master does not have at the same place (its last epoch
// unknown to the master, or longer there, or the CRC trailer of its last
// record, sent in HELLO, unlike the master's bytes there) has diverged.
// The master answers with the truncation point (truncate.go: the end of
// the newest epoch both histories hold, KIP-101/279); the replica
// truncates its store durably there (store.TruncateReplica), then its
// history, and reconnects. The CommitLog is cut first: trimming the
// history first and crashing before the cut would attribute the tail to an
// older epoch, which then passes as common with the master. Epochs past the
// log end are dropped at start. A replica shows only what the master
// confirmed (the Confirmed offset of every DATA frame moves its store's
// Replicated watermark) and never truncates below what it showed: it
// stops with ErrDiverged instead, as it does when no epoch is common or
// its last record's CRC differs from the master's.
//
// Acknowledgement (master.go): a SYNC_MASTER's store runs with
// ExternalReplication; the master moves its Replicated watermark to the
// smallest ack of the in-sync replicas (flushed bytes for a SYNC_FLUSH
// slave, written for an ASYNC_FLUSH one), and only while at least
// MinInSyncReplicas copies, its own included, are in sync. A replica joins
// the in-sync set once it holds everything already confirmed, and leaves
// it when its connection ends or it acknowledges nothing for AckTimeout
// while it has bytes to acknowledge. CheckSend refuses sends before
// anything is stored while too few copies are in sync; a send that waits
// longer than the store's ReplicationTimeout gets PutFlushSlaveTimeout.
// An ASYNC_MASTER streams the same way and waits for nobody.
//
// Fencing (a controller's election): Slave.Fence(e) makes a replica
// refuse every master below epoch e (the epoch of its history's last
// entry, sent in HELLO_OK): a session with one is closed at once, with a
// log line, and no DATA frame of it is applied after Fence returns
// (ErrFencedMaster; the replica dials again and is refused until its
// master is at e or later). SlaveConfig.FencedEpoch carries a promise
// kept across restarts. Master.Fence(e) above the master's epoch stops
// it for good: CheckSend and the store's put gate refuse every send, and
// the Replicated watermark no longer moves, so a send still waiting for
// its replicas is answered without SEND_OK. MasterConfig.Epoch starts a
// master at the controller's epoch instead of the history's last + 1.
//
// Leases (an ASYNC_MASTER under a controller, MasterConfig.Leased): the
// store runs with ExternalReplication and the master moves Replicated to
// what its own log confirmed (Flushed under SYNC_FLUSH, Written under
// ASYNC_FLUSH: store.LocalStage) only if, after reading that offset, it
// still holds the lease SetLease gave it (a monotonic instant); without
// one CheckSend and the put gate refuse every send. A member of such a
// group (SlaveConfig.TruncateShown) whose new master's truncation point
// is below what it showed — a tail it acknowledged as master that no
// replica got — does not stop on ErrDiverged: Run returns a
// *ShownTruncation (the point, its log end, the records past it) for the
// caller to cut the closed store there (store.TruncateClosed) and follow
// again; those records are lost.
//
// State (status.go): Master.State and Slave.State are read-only snapshots
// for operators (role, epoch, log end, confirmed offset; per replica the
// acknowledged offset, lag in bytes and in time, in sync, last ack; a
// slave's link to its master), rendered for the broker's runtime info by
// State.RuntimeInfo. They take Master.mu briefly and read the store's
// watermarks; they change nothing.
//
// The package imports only store and vfs of Keel's packages: the broker
// learns of replication only through the SendGate (CheckSend), HAAddr and
// OnMasterAddress hooks that cmd/keel (wire_replication.go) passes it.
package replication
