package metrics

import (
	"bufio"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"
)

var sampleControlled = ControlledStats{Role: "master", MasterEpoch: 4, PromisedEpoch: 4, Fences: 3, RoleChanges: 2,
	Leased: true, LeaseHeld: true, LostRecords: 7, LostBytes: 1400}

var ctlNow = time.Unix(1_700_000_000, 0)

var sampleController = ControllerStats{RaftState: "Leader", Voter: true, LeaderKnown: true, Acting: true, Term: 7,
	Elections: map[string]uint64{"initial": 1, "elect": 2, "unclean": 1}, FencedReplicas: 9,
	Groups: []ControllerGroupStats{
		{Group: "broker-a", MasterEpoch: 4},
		{Group: "broker-b", MasterEpoch: 2, WithoutMasterSince: ctlNow.Add(-42500 * time.Millisecond)},
	}}

// scrapeHandler reads one scrape of h: series (name and labels) to value.
func scrapeHandler(t *testing.T, h http.Handler) map[string]float64 {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("scrape: %d %s", rec.Code, rec.Body)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(rec.Body)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("bad sample %q", line)
		}
		out[line[:i]] = v
	}
	return out
}

func wantSeries(t *testing.T, got map[string]float64, want map[string]float64) {
	t.Helper()
	for series, w := range want {
		if v, ok := got[series]; !ok || v != w {
			t.Errorf("%s = %v (present %v), want %v", series, v, ok, w)
		}
	}
}

func TestControllerMetrics(t *testing.T) {
	st := sampleController
	m := NewController(func() ControllerStats { return st }, func() time.Time { return ctlNow }, false)
	got := scrapeHandler(t, m.Handler())
	wantSeries(t, got, map[string]float64{
		`keel_controller_raft_state{state="Leader"}`:                     1,
		`keel_controller_raft_voter`:                                     1,
		`keel_controller_raft_leader_known`:                              1,
		`keel_controller_acting_leader`:                                  1,
		`keel_controller_raft_term`:                                      7,
		`keel_controller_elections_total{kind="initial"}`:                1,
		`keel_controller_elections_total{kind="elect"}`:                  2,
		`keel_controller_elections_total{kind="unclean"}`:                1,
		`keel_controller_elections_total{kind="switch-over"}`:            0,
		`keel_controller_fenced_replicas_total`:                          9,
		`keel_controller_groups`:                                         2,
		`keel_controller_group_master_epoch{group="broker-a"}`:           4,
		`keel_controller_group_master_epoch{group="broker-b"}`:           2,
		`keel_controller_groups_without_master`:                          1,
		`keel_controller_group_without_master_seconds{group="broker-b"}`: 42.5,
	})
	if _, ok := got[`keel_controller_group_without_master_seconds{group="broker-a"}`]; ok {
		t.Error("a group with a master has a time without a master")
	}
	for series := range got {
		if !strings.HasPrefix(series, "keel_controller_") {
			t.Errorf("a controller exports %s", series)
		}
	}

	// A follower: no count of groups without a master (it does not know).
	st = ControllerStats{RaftState: "Follower", Voter: true, Groups: []ControllerGroupStats{{Group: "broker-a", MasterEpoch: 4}}}
	got = scrapeHandler(t, m.Handler())
	wantSeries(t, got, map[string]float64{
		`keel_controller_raft_state{state="Follower"}`:  1,
		`keel_controller_raft_leader_known`:             0,
		`keel_controller_acting_leader`:                 0,
		`keel_controller_elections_total{kind="elect"}`: 0,
	})
	if _, ok := got[`keel_controller_groups_without_master`]; ok {
		t.Error("a follower exports keel_controller_groups_without_master")
	}
}

func TestControlledBrokerMetrics(t *testing.T) {
	e := startEnv(t, func(c *Config) { c.Controlled = func() ControlledStats { return sampleControlled } })
	wantSeries(t, e.scrape(), map[string]float64{
		`keel_controlled_role{role="master"}`: 1,
		`keel_controlled_master_epoch`:        4,
		`keel_controlled_promised_epoch`:      4,
		`keel_controlled_fences_total`:        3,
		`keel_controlled_role_changes_total`:  2,
		`keel_controlled_lease_held`:          1,
		`keel_controlled_lost_records_total`:  7,
		`keel_controlled_lost_bytes_total`:    1400,
	})
	// Outside controller mode: none of them.
	e = startEnv(t)
	for series := range e.scrape() {
		if strings.HasPrefix(series, "keel_controlled_") {
			t.Errorf("a broker outside controller mode exports %s", series)
		}
	}
}
