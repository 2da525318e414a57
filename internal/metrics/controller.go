package metrics

// Controller mode (docs/replication.md, "Controller"): a controller
// voter's figures (NewController; read at scrape time from
// controller.Stats, copied by the wiring into ControllerStats) and a
// broker's side of the protocol (Sources.Controlled). This package does
// not import the controller.

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// ControllerStats is one controller voter's figures.
type ControllerStats struct {
	RaftState   string // Leader, Follower, Candidate, Shutdown
	Voter       bool
	LeaderKnown bool
	Acting      bool
	Term        uint64
	// Elections this node committed as leader, by kind; FencedReplicas
	// the fence answers it received as leader (since the process
	// started).
	Elections      map[string]uint64
	FencedReplicas uint64
	Groups         []ControllerGroupStats
}

// ControllerGroupStats is one broker group as a voter sees it.
type ControllerGroupStats struct {
	Group              string
	MasterEpoch        uint32
	WithoutMasterSince time.Time // zero: it has a live master (or the node is not the acting leader)
}

// ControlledStats is a broker's side of controller mode.
type ControlledStats struct {
	Role        string // fenced, master or slave
	MasterEpoch uint32 // the epoch of the view the broker acts on
	// PromisedEpoch is the highest epoch promised in a fence; Fences the
	// fence requests it answered, RoleChanges the role changes it began
	// (since the process started).
	PromisedEpoch uint32
	Fences        uint64
	RoleChanges   uint64
	// Leased: the broker is an ASYNC_MASTER, which acknowledges only
	// while LeaseHeld (a lease from the controllers).
	Leased, LeaseHeld bool
	// LostRecords and LostBytes: what it cut below what it had shown
	// (acknowledged as an ASYNC_MASTER, not on the new master).
	LostRecords, LostBytes uint64
}

// The election kinds, always exported (0 until one happens), so rate()
// and increase() see a series from the first scrape.
var electionKinds = []string{"initial", "elect", "unclean", "switch-over"}

var (
	dCtlRaftState     = desc("keel_controller_raft_state", "1, labelled with this controller's raft state (Leader, Follower, Candidate, Shutdown).", "state")
	dCtlVoter         = desc("keel_controller_raft_voter", "1 if this controller is a voter of the raft configuration.")
	dCtlLeaderKnown   = desc("keel_controller_raft_leader_known", "1 if this controller knows a raft leader (itself or another voter).")
	dCtlActing        = desc("keel_controller_acting_leader", "1 if this controller is the acting leader (it elects masters).")
	dCtlTerm          = desc("keel_controller_raft_term", "This controller's current raft term.")
	dCtlElections     = desc("keel_controller_elections_total", "Master elections this controller committed as leader, by kind (initial, elect, unclean, switch-over).", "kind")
	dCtlFenced        = desc("keel_controller_fenced_replicas_total", "Fence answers this controller received as leader (each a replica promising a new master epoch).")
	dCtlGroups        = desc("keel_controller_groups", "Broker groups the controller cluster holds.")
	dCtlMasterEpoch   = desc("keel_controller_group_master_epoch", "A broker group's master epoch in the controller's state.", "group")
	dCtlNoMaster      = desc("keel_controller_groups_without_master", "Acting leader: broker groups without a live master now.")
	dCtlNoMasterSecs  = desc("keel_controller_group_without_master_seconds", "Acting leader: seconds a broker group has been without a live master (from its master's last heartbeat); absent while it has one.", "group")
	dBrokerCtlRole    = desc("keel_controlled_role", "Broker in controller mode: 1, labelled with the role the controller gave it (fenced, master, slave).", "role")
	dBrokerCtlEpoch   = desc("keel_controlled_master_epoch", "Broker in controller mode: the master epoch of the view it acts on.")
	dBrokerCtlPromise = desc("keel_controlled_promised_epoch", "Broker in controller mode: the highest master epoch it promised in a fence.")
	dBrokerCtlFences  = desc("keel_controlled_fences_total", "Broker in controller mode: fence requests it answered with a promise.")
	dBrokerCtlChanges = desc("keel_controlled_role_changes_total", "Broker in controller mode: role changes it began (each restarts its services in the new role).")
	dBrokerCtlLease   = desc("keel_controlled_lease_held", "Broker in controller mode, ASYNC_MASTER: 1 while it holds a lease from the controllers (it acknowledges sends only then); absent on other roles.")
	dBrokerCtlLostRec = desc("keel_controlled_lost_records_total", "Broker in controller mode: records it had acknowledged as ASYNC_MASTER, or shown, that the group's new master does not hold, cut when it rejoined as a slave.")
	dBrokerCtlLostB   = desc("keel_controlled_lost_bytes_total", "Broker in controller mode: CommitLog bytes of those records.")
)

var controlledDescs = []*prometheus.Desc{dBrokerCtlRole, dBrokerCtlEpoch, dBrokerCtlPromise, dBrokerCtlFences, dBrokerCtlChanges,
	dBrokerCtlLease, dBrokerCtlLostRec, dBrokerCtlLostB}

func (c *collector) collectControlled(ch chan<- prometheus.Metric) {
	if c.m.cfg.Controlled == nil {
		return
	}
	s := c.m.cfg.Controlled()
	gauge(ch, dBrokerCtlRole, 1, s.Role)
	gauge(ch, dBrokerCtlEpoch, float64(s.MasterEpoch))
	gauge(ch, dBrokerCtlPromise, float64(s.PromisedEpoch))
	counter(ch, dBrokerCtlFences, float64(s.Fences))
	counter(ch, dBrokerCtlChanges, float64(s.RoleChanges))
	if s.Leased {
		gauge(ch, dBrokerCtlLease, boolGauge(s.LeaseHeld))
	}
	counter(ch, dBrokerCtlLostRec, float64(s.LostRecords))
	counter(ch, dBrokerCtlLostB, float64(s.LostBytes))
}

// ControllerMetrics owns the registry of a controller process.
type ControllerMetrics struct {
	reg *prometheus.Registry
}

// NewController builds a controller process's metrics: stats is read at
// every scrape; now is the clock of the time without a master
// (time.Now if nil); goMetrics adds the Go runtime and process
// collectors.
func NewController(stats func() ControllerStats, now func() time.Time, goMetrics bool) *ControllerMetrics {
	if now == nil {
		now = time.Now
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(controllerCollector{stats: stats, now: now})
	if goMetrics {
		reg.MustRegister(collectors.NewGoCollector(), processCollector())
	}
	return &ControllerMetrics{reg: reg}
}

// Registry is the registry holding the metrics.
func (m *ControllerMetrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the metrics in the Prometheus exposition format.
func (m *ControllerMetrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

type controllerCollector struct {
	stats func() ControllerStats
	now   func() time.Time
}

var controllerDescs = []*prometheus.Desc{dCtlRaftState, dCtlVoter, dCtlLeaderKnown, dCtlActing, dCtlTerm, dCtlElections,
	dCtlFenced, dCtlGroups, dCtlMasterEpoch, dCtlNoMaster, dCtlNoMasterSecs}

func (c controllerCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range controllerDescs {
		ch <- d
	}
}

func (c controllerCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.stats()
	now := c.now()
	gauge(ch, dCtlRaftState, 1, s.RaftState)
	gauge(ch, dCtlVoter, boolGauge(s.Voter))
	gauge(ch, dCtlLeaderKnown, boolGauge(s.LeaderKnown))
	gauge(ch, dCtlActing, boolGauge(s.Acting))
	gauge(ch, dCtlTerm, float64(s.Term))
	for _, k := range electionKinds {
		counter(ch, dCtlElections, float64(s.Elections[k]), k)
	}
	counter(ch, dCtlFenced, float64(s.FencedReplicas))
	gauge(ch, dCtlGroups, float64(len(s.Groups)))
	without := 0
	for _, g := range s.Groups {
		gauge(ch, dCtlMasterEpoch, float64(g.MasterEpoch), g.Group)
		if !g.WithoutMasterSince.IsZero() {
			without++
			gauge(ch, dCtlNoMasterSecs, max(0, now.Sub(g.WithoutMasterSince).Seconds()), g.Group)
		}
	}
	if s.Acting {
		gauge(ch, dCtlNoMaster, float64(without))
	}
}
