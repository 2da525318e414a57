package replication

import (
	"cmp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/keelmq/keel/internal/store"
)

// Replication state, read-only, for operators: /metrics, the broker's
// runtime info (and through it `keel cluster` and the console). Nothing
// here changes what the master or the slave do.

// Roles, as broker.conf spells them.
const (
	RoleSyncMaster  = "SYNC_MASTER"
	RoleAsyncMaster = "ASYNC_MASTER"
	RoleSlave       = "SLAVE"
)

// State is one member's view of its replication. A master fills the
// master fields and Replicas (one per connected replica); a slave fills
// the slave fields.
type State struct {
	Role       string
	BrokerName string
	Epoch      uint32 // the newest epoch of the member's history (0: none yet)
	LogEnd     int64  // the member's written offset
	// Confirmed: on a master, the store's confirmed offset (what a send
	// may be acknowledged up to); on a slave, the master's confirmed
	// offset as its last frame said.
	Confirmed int64

	// Master only.
	MinInSyncReplicas int // the copies a SYNC_MASTER needs in sync to take sends
	InSyncReplicas    int // copies in sync, the master's own included
	Replicas          []ReplicaState

	// Slave only.
	BrokerID    int64
	MasterAddr  string
	Connected   bool      // following the master now (the handshake passed)
	LastContact time.Time // last frame from the master (zero: never)
	DiskFull    bool      // not following: its disk is full (space.go)
}

// ReplicaState is one connected replica as its master sees it.
type ReplicaState struct {
	BrokerID int64
	Addr     string // the replica's address on the HA connection
	Acked    int64  // what its acks say it holds (flushed bytes for a SYNC_FLUSH replica, else written)
	LagBytes int64  // the master's written offset minus Acked
	// Lag is the age of the oldest record the replica lacks (now minus the
	// store time of the record at Acked); 0 when it holds everything, -1
	// when that record cannot be read.
	Lag     time.Duration
	InSync  bool
	LastAck time.Time // its last ack, moving or not (zero: none yet)
}

// InSyncShort reports whether a SYNC_MASTER has fewer copies in sync than
// it needs to take sends.
func (s State) InSyncShort() bool {
	return s.Role == RoleSyncMaster && s.InSyncReplicas < s.MinInSyncReplicas
}

// State returns the master's replication state at now.
func (m *Master) State(now time.Time) State {
	st := m.cfg.Store
	s := State{Role: RoleAsyncMaster, BrokerName: m.cfg.BrokerName, Epoch: m.hist.Last().Epoch,
		MinInSyncReplicas: m.cfg.MinInSyncReplicas}
	if m.cfg.Sync {
		s.Role = RoleSyncMaster
	}
	written := st.Offset(store.Written)
	m.mu.Lock()
	for f := range m.replicas {
		r := ReplicaState{BrokerID: f.id, Addr: f.conn.RemoteAddr().String(), Acked: f.acked.Load(), InSync: f.inSync}
		if t := f.lastAck.Load(); t != 0 {
			r.LastAck = time.Unix(0, t)
		}
		s.Replicas = append(s.Replicas, r)
	}
	s.InSyncReplicas = m.InSync()
	m.mu.Unlock()
	s.LogEnd, s.Confirmed = written, st.Offset(store.Confirmed)
	for i := range s.Replicas {
		r := &s.Replicas[i]
		r.LagBytes = max(0, written-r.Acked)
		r.Lag = lagAt(st, r.Acked, written, now)
	}
	slices.SortFunc(s.Replicas, func(a, b ReplicaState) int { return cmp.Compare(a.BrokerID, b.BrokerID) })
	return s
}

// lagAt is the age at now of the first record at or after acked, or 0 if
// nothing is past acked.
func lagAt(st *store.Store, acked, written int64, now time.Time) time.Duration {
	if acked >= written {
		return 0
	}
	ms, err := st.StoreTimeAt(acked)
	if err != nil {
		return -1
	}
	return max(0, now.Sub(time.UnixMilli(ms)))
}

// link is what a slave knows of its connection to the master.
type link struct {
	connected atomic.Bool
	confirmed atomic.Int64 // the master's confirmed offset, from its last frame
	contact   atomic.Int64 // Unix nanoseconds of the last frame from the master
}

// up: the handshake passed.
func (l *link) up() { l.connected.Store(true); l.contact.Store(time.Now().UnixNano()) }

// heard: a frame from the master carrying its confirmed offset.
func (l *link) heard(confirmed int64) {
	l.confirmed.Store(confirmed)
	l.contact.Store(time.Now().UnixNano())
}

// down: the connection ended.
func (l *link) down() { l.connected.Store(false) }

// State returns the slave's replication state.
func (s *Slave) State() State {
	st := State{Role: RoleSlave, BrokerName: s.cfg.BrokerName, BrokerID: s.cfg.BrokerID, MasterAddr: s.MasterAddr(),
		Epoch: s.History().Last().Epoch, LogEnd: s.cfg.Store.Offset(store.Written),
		Confirmed: s.link.confirmed.Load(), Connected: s.link.connected.Load(), DiskFull: s.diskFull.Load()}
	if t := s.link.contact.Load(); t != 0 {
		st.LastContact = time.Unix(0, t)
	}
	return st
}

// RuntimeInfo renders the state as entries of the broker's
// GET_BROKER_RUNTIME_INFO table (docs/replication.md lists them). Times
// are Unix milliseconds (0: never); the replica keys carry the replica's
// broker id, listed in keelReplicationReplicas.
func (s State) RuntimeInfo() map[string]string {
	i64 := func(v int64) string { return strconv.FormatInt(v, 10) }
	ms := func(t time.Time) string {
		if t.IsZero() {
			return "0"
		}
		return i64(t.UnixMilli())
	}
	info := map[string]string{
		"keelReplicationRole":            s.Role,
		"keelReplicationEpoch":           strconv.FormatUint(uint64(s.Epoch), 10),
		"keelReplicationWrittenOffset":   i64(s.LogEnd),
		"keelReplicationConfirmedOffset": i64(s.Confirmed),
	}
	if s.Role == RoleSlave {
		info["keelReplicationMasterAddress"] = s.MasterAddr
		info["keelReplicationConnected"] = strconv.FormatBool(s.Connected)
		info["keelReplicationLastContactTimestamp"] = ms(s.LastContact)
		info["keelReplicationDiskFull"] = strconv.FormatBool(s.DiskFull)
		return info
	}
	info["keelReplicationInSyncReplicas"] = strconv.Itoa(s.InSyncReplicas)
	info["keelReplicationMinInSyncReplicas"] = strconv.Itoa(s.MinInSyncReplicas)
	ids := make([]string, 0, len(s.Replicas))
	for _, r := range s.Replicas {
		id := i64(r.BrokerID)
		ids = append(ids, id)
		p := "keelReplicationReplica" + id
		info[p+"Address"] = r.Addr
		info[p+"AckedOffset"] = i64(r.Acked)
		info[p+"LagBytes"] = i64(r.LagBytes)
		lag := "-1"
		if r.Lag >= 0 {
			lag = strconv.FormatFloat(r.Lag.Seconds(), 'f', 3, 64)
		}
		info[p+"LagSeconds"] = lag
		info[p+"InSync"] = strconv.FormatBool(r.InSync)
		info[p+"LastAckTimestamp"] = ms(r.LastAck)
	}
	info["keelReplicationReplicas"] = strings.Join(ids, ",")
	return info
}
