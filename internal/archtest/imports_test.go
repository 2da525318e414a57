package archtest

import (
	"strings"
	"testing"
)

// layerRule says which module packages (module-relative prefixes) and which
// third-party modules the packages under dir may import. The standard library
// is always allowed.
type layerRule struct {
	dir      string
	internal []string // allowed module packages, besides dir itself
	external []string // allowed third-party import path prefixes
	why      string
}

// layerRules are the "Architecture invariants" of ARCHITECTURE.md. Change
// both together.
var layerRules = []layerRule{
	{dir: "internal/message", why: "the record format is the bottom layer: standard library only"},
	{dir: "internal/vfs", external: []string{"golang.org/x/sys/"},
		why: "the filesystem layer knows nothing of Keel"},
	{dir: "internal/store", internal: []string{"internal/vfs", "internal/message"}, external: []string{"golang.org/x/sys/"},
		why: "the store is protocol-neutral: no remoting, broker, namesrv, config or CLI"},
	{dir: "internal/remoting", internal: []string{"internal/doorstats"}, why: "the protocol layer knows nothing of storage or brokers"},
	{dir: "internal/doorstats", why: "the doors' traffic counters are plain atomics every door and the metrics share: standard library only"},
	{dir: "internal/namesrv", internal: []string{"internal/remoting"},
		why: "the NameServer is a route registry on the remoting layer"},
	{dir: "internal/config", why: "config holds plain values; callers convert them"},
	{dir: "internal/acl", internal: []string{"internal/remoting", "internal/vfs"},
		why: "access control wraps the protocol layer's handlers; it does not reach into the broker"},
	{dir: "internal/tlsconf", internal: []string{"internal/remoting"},
		why: "TLS wraps the protocol layer's listeners"},
	{dir: "internal/netlimit", why: "the request budget and connection limits are shared by every listener: standard library only"},
	{dir: "internal/amqpinfo", why: "the description of AMQP queues and exchanges is plain data shared by the AMQP door and the admin client: standard library only"},
	{dir: "internal/kafkainfo", why: "the description of Kafka groups and connections is plain data shared by the Kafka door and the admin client: standard library only"},
	{dir: "internal/heapwatch", why: "the hostile-input tests' heap measurement: standard library only"},
	{dir: "internal/faultproxy", why: "the fault-injecting TCP proxy of the failover tests: standard library only"},
	{dir: "internal/history", why: "the failover tests' client history and its checker: standard library only"},
	{dir: "internal/pendingtxn", why: "the description of undecided transactions is plain data shared by the engine and the admin client: standard library only"},
	{dir: "internal/core", internal: []string{"internal/store", "internal/message", "internal/vfs", "internal/pendingtxn"},
		why: "the core is protocol-free: every front door (RocketMQ, Kafka and AMQP) shares it"},
	{dir: "internal/broker", internal: []string{"internal/core", "internal/store", "internal/remoting", "internal/message", "internal/config", "internal/vfs", "internal/translate"},
		why: "the broker is the RocketMQ adapter: it joins the core and the protocol; it talks to the NameServer over the wire"},
	{dir: "internal/admin", internal: []string{"internal/remoting", "internal/message", "internal/acl", "internal/pendingtxn", "internal/amqpinfo", "internal/kafkainfo"},
		why: "the admin client (CLI, console) sees a cluster only over the wire, as a remote operator does"},
	{dir: "internal/amqpmgmt", internal: []string{"internal/amqpinfo"},
		why: "the AMQP management API serves the AMQP door's snapshots as plain amqpinfo values; it reaches into no door, store or core"},
	{dir: "internal/console", internal: []string{"internal/admin"},
		why: "the console shows what the admin client reads; it never reaches into the broker or the store"},
	{dir: "internal/metrics", internal: []string{"internal/broker", "internal/store", "internal/doorstats"}, external: []string{"github.com/prometheus/"},
		why: "metrics read the broker's and the store's snapshots and hooks; only this package imports Prometheus"},
	{dir: "internal/replication", internal: []string{"internal/store", "internal/vfs"},
		why: "replication copies the store's CommitLog over its own protocol; it knows no broker, protocol front door or config"},
	{dir: "internal/testcluster", internal: []string{"internal/broker", "internal/namesrv", "internal/remoting", "internal/store", "internal/vfs"},
		why: "the shared test harness assembles a NameServer and a broker (with its schedule, transaction and dedup engines) only"},
	{dir: "internal/kafka", internal: []string{"internal/core", "internal/store", "internal/message", "internal/translate", "internal/doorstats", "internal/kafkainfo", "internal/netlimit", "internal/vfs"},
		external: []string{"github.com/twmb/franz-go/pkg/kmsg"},
		why:      "the Kafka front door joins the core and the Kafka protocol (kmsg's codecs)"},
	{dir: "internal/controller", internal: []string{"internal/remoting", "internal/vfs"},
		external: []string{"github.com/hashicorp/raft", "github.com/hashicorp/go-hclog"},
		why:      "the controller holds group metadata in raft and speaks remoting; it knows no store, broker, front door or config"},
	{dir: "internal/translate", internal: []string{"internal/store/record", "internal/message"},
		external: []string{"github.com/klauspost/compress/", "github.com/pierrec/lz4/"},
		why:      "the read-path converters between the front doors' formats stand below every front door: they know the stored records and the formats' bytes, no front door, core or store"},
}

func TestLayering(t *testing.T) {
	m := load(t)
	for _, p := range m.sorted() {
		rp := m.rel(p.path)
		for _, r := range layerRules {
			if !under(rp, r.dir) {
				continue
			}
			for imp := range p.imports {
				if msg := r.check(m, imp); msg != "" {
					t.Errorf("%s imports %s: %s (%s). See ARCHITECTURE.md, Architecture invariants.", rp, m.rel(imp), msg, r.why)
				}
			}
		}
	}
}

func (r layerRule) check(m *module, imp string) string {
	if isStd(imp) {
		return ""
	}
	if rel := m.rel(imp); rel != imp {
		if under(rel, r.dir) {
			return ""
		}
		for _, a := range r.internal {
			if under(rel, a) {
				return ""
			}
		}
		return "not allowed"
	}
	for _, a := range r.external {
		if strings.HasPrefix(imp, a) {
			return ""
		}
	}
	return "third-party module not allowed"
}

// TestTestClusterOnlyInTests keeps the shared test harnesses (the
// in-process cluster, the heap watch of the hostile-input tests, the
// failover tests' fault proxy and history checker) out of
// production code: only _test.go files may import them.
func TestTestClusterOnlyInTests(t *testing.T) {
	m := load(t)
	for _, h := range []string{"internal/testcluster", "internal/heapwatch", "internal/faultproxy", "internal/history"} {
		harness := m.path + "/" + h
		for _, p := range m.sorted() {
			if p.imports[harness] {
				t.Errorf("%s imports %s from a non-test file: it is a test harness", m.rel(p.path), h)
			}
		}
	}
}

// TestStoreIsProtocolNeutral states the store rule transitively, so that a
// chain through a package with no rule of its own cannot break it.
func TestStoreIsProtocolNeutral(t *testing.T) {
	m := load(t)
	forbidden := []string{"internal/remoting", "internal/broker", "internal/namesrv", "internal/config", "cmd"}
	for _, p := range m.sorted() {
		if !under(m.rel(p.path), "internal/store") {
			continue
		}
		for dep, chain := range m.deps(p) {
			for _, f := range forbidden {
				if under(dep, f) {
					t.Errorf("%s depends on %s via %s", m.rel(p.path), dep, strings.Join(chain, " -> "))
				}
			}
		}
	}
}

// externalRule limits where a third-party module may be imported.
type externalRule struct {
	prefix    string
	allowed   []string // module-relative package prefixes
	testsOnly bool     // elsewhere, _test.go files may import it
	why       string
}

var externalRules = []externalRule{
	{prefix: "github.com/prometheus/", allowed: []string{"internal/metrics"},
		why: "only internal/metrics imports Prometheus; other packages expose narrow hooks"},
	{prefix: "github.com/apache/rocketmq-client-go/", allowed: []string{"examples"}, testsOnly: true,
		why: "the official client is the judge of compatibility, used in tests and examples only"},
	{prefix: "github.com/spf13/", allowed: []string{"cmd"},
		why: "flag parsing belongs to the command"},
	{prefix: "github.com/twmb/franz-go/pkg/kgo", allowed: []string{"examples"}, testsOnly: true,
		why: "franz-go's client judges the Kafka front door's compatibility, in tests and examples only"},
}

func TestThirdPartyPlacement(t *testing.T) {
	m := load(t)
	for _, p := range m.sorted() {
		rp := m.rel(p.path)
		for _, r := range externalRules {
			if r.allows(rp) {
				continue
			}
			check := func(imports map[string]bool, kind string) {
				for imp := range imports {
					if strings.HasPrefix(imp, r.prefix) {
						t.Errorf("%s (%s) imports %s: %s", rp, kind, imp, r.why)
					}
				}
			}
			check(p.imports, "non-test files")
			if !r.testsOnly {
				check(p.testImports, "test files")
			}
		}
	}
}

func (r externalRule) allows(rp string) bool {
	for _, a := range r.allowed {
		if under(rp, a) {
			return true
		}
	}
	return false
}

// TestRulesMatchPackages fails when a rule names a directory that holds no
// package, so a rename cannot silently switch a rule off.
func TestRulesMatchPackages(t *testing.T) {
	m := load(t)
	for _, r := range layerRules {
		found := false
		for _, p := range m.pkgs {
			found = found || under(m.rel(p.path), r.dir)
		}
		if !found && !pending[r.dir] {
			t.Errorf("layer rule for %s matches no package", r.dir)
		}
	}
}

// pending lists rule directories whose packages are still being written.
// Remove an entry when its package lands.
var pending = map[string]bool{}

// controllerImporters may import internal/controller: the binary, which
// runs it, and the broker, whose side of the protocol (heartbeats, fences,
// promotion) lives with the broker. Nothing below the broker (core, store,
// replication, the other front doors) knows a controller exists.
var controllerImporters = []string{"cmd", "internal/broker", "internal/controller"}

func TestControllerImporters(t *testing.T) {
	m := load(t)
	ctl := m.path + "/internal/controller"
	for _, p := range m.sorted() {
		rp := m.rel(p.path)
		if (p.imports[ctl] || p.testImports[ctl]) && !underAny(rp, controllerImporters) {
			t.Errorf("%s imports internal/controller: only %v may (see ARCHITECTURE.md)", rp, controllerImporters)
		}
	}
}
