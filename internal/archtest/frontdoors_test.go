package archtest

import (
	"strings"
	"testing"
)

// The core and its front doors (ARCHITECTURE.md, "Core, store and front
// doors"): internal/core is protocol-free, and the protocol adapters over
// it are siblings that never import one another.

// protocolDirs hold protocol knowledge (wire codecs, adapters, clients of
// a protocol, the CLI): the core depends on none of them, not even
// through another package.
var protocolDirs = []string{
	"internal/remoting", "internal/broker", "internal/namesrv", "internal/acl", "internal/tlsconf",
	"internal/admin", "internal/bench", "internal/console", "internal/kafka", "internal/amqp",
	"internal/config", "cmd",
}

// protocolFree are the packages every front door shares: the core, and
// the engines it drives through its hooks (they still live under
// internal/broker).
var protocolFree = []string{"internal/core", "internal/broker/schedule", "internal/broker/transaction", "internal/broker/dedup"}

// TestTranslateImportsNoFrontDoor: the converters every front door uses
// on its read path (internal/translate) depend on no protocol package
// (front doors, remoting, config, CLI), so that each door may import them
// without importing another door through them.
func TestTranslateImportsNoFrontDoor(t *testing.T) {
	m := load(t)
	for _, p := range m.sorted() {
		rp := m.rel(p.path)
		if !under(rp, "internal/translate") {
			continue
		}
		for dep, chain := range m.deps(p) {
			if underAny(dep, protocolDirs) || under(dep, "internal/core") {
				t.Errorf("%s depends on %s via %s: the converters sit below the front doors", rp, dep, strings.Join(chain, " -> "))
			}
		}
	}
}

// adapter is a front door: the packages under dir speak one protocol over
// the core. engines are directories under dir that are not part of the
// adapter (shared engines that happen to live there).
type adapter struct {
	dir     string
	engines []string
}

var adapters = []adapter{
	{dir: "internal/broker", engines: []string{"internal/broker/schedule", "internal/broker/transaction", "internal/broker/dedup"}},
	{dir: "internal/kafka"},
	{dir: "internal/amqp"},
}

// protocolFreeViolations returns a line per protocol package a
// protocol-free package depends on, directly or not.
func protocolFreeViolations(m *module) []string {
	var out []string
	for _, p := range m.sorted() {
		rp := m.rel(p.path)
		if !underAny(rp, protocolFree) {
			continue
		}
		for dep, chain := range m.deps(p) {
			if underAny(dep, protocolDirs) && !underAny(dep, protocolFree) {
				out = append(out, rp+" depends on "+dep+" via "+strings.Join(chain, " -> "))
			}
		}
	}
	return out
}

// adapterOf returns the adapter dir a package belongs to, or "".
func adapterOf(rp string) string {
	for _, a := range adapters {
		if under(rp, a.dir) && !underAny(rp, a.engines) {
			return a.dir
		}
	}
	return ""
}

// crossAdapterImports returns a line per import of one adapter's package
// by another adapter's package (test files included: a test of one front
// door should not lean on another's internals either).
func crossAdapterImports(m *module) []string {
	var out []string
	for _, p := range m.sorted() {
		rp := m.rel(p.path)
		from := adapterOf(rp)
		if from == "" {
			continue
		}
		for _, imps := range []map[string]bool{p.imports, p.testImports} {
			for imp := range imps {
				if to := adapterOf(m.rel(imp)); to != "" && to != from {
					out = append(out, rp+" imports "+m.rel(imp)+" (adapter "+to+")")
				}
			}
		}
	}
	return out
}

func underAny(rp string, dirs []string) bool {
	for _, d := range dirs {
		if under(rp, d) {
			return true
		}
	}
	return false
}

func TestCoreIsProtocolFree(t *testing.T) {
	for _, v := range protocolFreeViolations(load(t)) {
		t.Errorf("%s: the core and its engines are protocol-free (see ARCHITECTURE.md)", v)
	}
}

func TestAdaptersDoNotImportEachOther(t *testing.T) {
	for _, v := range crossAdapterImports(load(t)) {
		t.Errorf("%s: front doors are siblings; share code through internal/core (see ARCHITECTURE.md)", v)
	}
}

// TestFrontDoorRulesCatchViolations runs both checks on a made-up module,
// so that they are known to fail when they should.
func TestFrontDoorRulesCatchViolations(t *testing.T) {
	m := &module{path: "x", pkgs: map[string]*pkg{}}
	add := func(dir string, imports ...string) {
		p := &pkg{path: "x/" + dir, dir: dir, imports: map[string]bool{}, testImports: map[string]bool{}}
		for _, i := range imports {
			p.imports["x/"+i] = true
		}
		m.pkgs[p.path] = p
	}
	add("internal/core", "internal/store", "internal/core/sub")
	add("internal/core/sub", "internal/remoting")
	add("internal/store")
	add("internal/remoting")
	add("internal/broker", "internal/core", "internal/remoting", "internal/broker/schedule")
	add("internal/broker/schedule", "internal/store")
	add("internal/kafka", "internal/core", "internal/broker/schedule")
	add("internal/amqp/codec", "internal/kafka")

	v := protocolFreeViolations(m)
	if len(v) != 2 || !strings.Contains(strings.Join(v, "\n"), "internal/core depends on internal/remoting via internal/core -> internal/core/sub -> internal/remoting") {
		t.Errorf("protocol-free violations %q, want core and core/sub on remoting", v)
	}
	v = crossAdapterImports(m)
	if len(v) != 1 || !strings.HasPrefix(v[0], "internal/amqp/codec imports internal/kafka") {
		t.Errorf("cross-adapter imports %q, want only amqp/codec -> kafka (a shared engine is not an adapter)", v)
	}
}
