package core

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/vfs"
)

// gateFS counts the files renamed into place; it can hold the first rename
// until released, and fail the next rename.
type gateFS struct {
	vfs.FS
	renames atomic.Int64
	hold    chan struct{} // if set, the first rename waits for it
	held    chan struct{} // closed when the first rename is waiting
	fail    atomic.Bool
}

var errGate = errors.New("injected rename failure")

func newGateFS(base vfs.FS, hold bool) *gateFS {
	g := &gateFS{FS: base, held: make(chan struct{})}
	if hold {
		g.hold = make(chan struct{})
	}
	return g
}

func (g *gateFS) Rename(oldname, newname string) error {
	if g.renames.Add(1) == 1 && g.hold != nil {
		close(g.held)
		<-g.hold
	}
	if g.fail.Swap(false) {
		return errGate
	}
	return g.FS.Rename(oldname, newname)
}

func memTable(fsys vfs.FS) *configTable[TopicConfig] {
	return newConfigTable[TopicConfig](fsys, "/data/config/topics.json", "topicConfigTable", func() int64 { return 1 })
}

// pendingCount is how many mutations wait for the next write.
func (t *configTable[T]) pendingCount() int {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if t.open == nil {
		return 0
	}
	return len(t.open.ops)
}

func waitPending(t *testing.T, tbl *configTable[TopicConfig], n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for tbl.pendingCount() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d mutations pending, want %d", tbl.pendingCount(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// createConcurrently creates topics T0..Tn-1 from n goroutines and returns
// their errors.
func createConcurrently(tbl *configTable[TopicConfig], from, n int) []error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			name := fmt.Sprintf("T%d", from+i)
			_, created, err := tbl.createIfAbsent(name, NewTopicConfig(name, 4, PermRW))
			if err == nil && !created {
				err = fmt.Errorf("%s not created", name)
			}
			errs[i] = err
		})
	}
	wg.Wait()
	return errs
}

// Creations made while a write is in flight share the next write, and none
// is visible before the write holding it completed.
func TestConfigTableGroupsConcurrentCreations(t *testing.T) {
	mem := vfs.NewMem()
	g := newGateFS(mem, true)
	tbl := memTable(g)
	first := make(chan error, 1)
	go func() { first <- createConcurrently(tbl, 0, 1)[0] }()
	<-g.held
	var rest []error
	done := make(chan struct{})
	go func() { rest = createConcurrently(tbl, 1, 20); close(done) }()
	waitPending(t, tbl, 20)
	if _, ok := tbl.get("T0"); ok {
		t.Fatal("T0 visible before its write completed")
	}
	if _, ok := tbl.get("T5"); ok {
		t.Fatal("T5 visible before any write holding it")
	}
	close(g.hold)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	<-done
	for _, err := range rest {
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := g.renames.Load(); n != 2 {
		t.Fatalf("%d writes of the table, want 2 (one for T0, one for the 20 gathered meanwhile)", n)
	}
	// Every acknowledged creation survives a power loss.
	mem.Crash()
	re := memTable(mem)
	if err := re.load(); err != nil {
		t.Fatal(err)
	}
	all, ver := re.all()
	if len(all) != 21 || ver.Counter != 21 {
		t.Fatalf("after a crash: %d topics, version %d; want 21, 21", len(all), ver.Counter)
	}
}

// A failed write fails every mutation not on disk yet, those gathered
// during it included, and leaves none of them in memory.
func TestConfigTableFailedGroupWrite(t *testing.T) {
	mem := vfs.NewMem()
	tbl := memTable(mem)
	if errs := createConcurrently(tbl, 0, 1); errs[0] != nil {
		t.Fatal(errs[0])
	}
	g := newGateFS(mem, true)
	tbl.fs = g
	g.fail.Store(true)
	first := make(chan error, 1)
	go func() { first <- createConcurrently(tbl, 1, 1)[0] }()
	<-g.held
	var rest []error
	done := make(chan struct{})
	go func() { rest = createConcurrently(tbl, 2, 5); close(done) }()
	waitPending(t, tbl, 5)
	close(g.hold)
	if err := <-first; !errors.Is(err, errGate) {
		t.Fatalf("first: %v, want the injected error", err)
	}
	<-done
	for _, err := range rest {
		if !errors.Is(err, errGate) {
			t.Fatalf("gathered creation: %v, want the injected error", err)
		}
	}
	if all, ver := tbl.all(); len(all) != 1 || ver.Counter != 1 {
		t.Fatalf("in memory after the failure: %d topics, version %d", len(all), ver.Counter)
	}
	if errs := createConcurrently(tbl, 10, 3); errors.Join(errs...) != nil {
		t.Fatal(errs)
	}
	re := memTable(mem)
	if err := re.load(); err != nil {
		t.Fatal(err)
	}
	if all, _ := re.all(); len(all) != 4 {
		t.Fatalf("on disk: %d topics, want 4", len(all))
	}
}

// createIfAbsent of a name whose creation is being written waits for that
// write and reports the stored value, not a second creation.
func TestConfigTableCreateIfAbsentWaitsForPendingCreation(t *testing.T) {
	g := newGateFS(vfs.NewMem(), true)
	tbl := memTable(g)
	first := make(chan error, 1)
	go func() {
		_, _, err := tbl.createIfAbsent("X", NewTopicConfig("X", 8, PermRW))
		first <- err
	}()
	<-g.held
	type result struct {
		tc             TopicConfig
		created        bool
		err            error
		onDiskOnReturn bool
	}
	second := make(chan result, 1)
	go func() {
		tc, created, err := tbl.createIfAbsent("X", NewTopicConfig("X", 2, PermRW))
		_, onDisk := tbl.get("X")
		second <- result{tc, created, err, onDisk}
	}()
	close(g.hold)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	r := <-second
	if r.err != nil || r.created || r.tc.WriteQueueNums != 8 || !r.onDiskOnReturn {
		t.Fatalf("second createIfAbsent: %+v (want the first's value, on disk when it returned)", r)
	}
}

// The limit counts creations not yet written.
func TestConfigTableLimitCountsPendingCreations(t *testing.T) {
	g := newGateFS(vfs.NewMem(), true)
	tbl := memTable(g).withLimit("topic", 3)
	first := make(chan error, 1)
	go func() { first <- createConcurrently(tbl, 0, 1)[0] }()
	<-g.held
	errs := make(chan []error, 1)
	go func() { errs <- createConcurrently(tbl, 1, 5) }()
	waitPending(t, tbl, 2)
	close(g.hold)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	failed := 0
	for _, err := range <-errs {
		if err != nil {
			if !strings.Contains(err.Error(), "topic limit of 3") {
				t.Fatal(err)
			}
			failed++
		}
	}
	if all, _ := tbl.all(); len(all) != 3 || failed != 3 {
		t.Fatalf("%d topics, %d refused; want 3, 3", len(all), failed)
	}
}

// The file written is the layout RocketMQ reads, entries sorted by name.
func TestConfigTableFileLayout(t *testing.T) {
	mem := vfs.NewMem()
	tbl := memTable(mem)
	for _, name := range []string{"B", "A"} {
		if err := tbl.put(name, NewTopicConfig(name, 1, PermRW)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := tbl.remove("B"); err != nil {
		t.Fatal(err)
	}
	data, _, err := readFile(mem, "/data/config/topics.json")
	if err != nil {
		t.Fatal(err)
	}
	want := `{"dataVersion":{"timestamp":1,"counter":3},"topicConfigTable":{"A":{"topicName":"A","readQueueNums":1,"writeQueueNums":1,"perm":6,"topicFilterType":"SINGLE_TAG","topicSysFlag":0,"order":false,"attributes":{}}}}`
	if string(data) != want {
		t.Fatalf("file:\n%s\nwant\n%s", data, want)
	}
}
