package amqp

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/amqp/wire"
	"github.com/keelmq/keel/internal/store"
	"github.com/keelmq/keel/internal/store/record"
	"github.com/keelmq/keel/internal/vfs"
	amqp091 "github.com/rabbitmq/amqp091-go"
)

// copyTree copies the files under src to dst, but for the directory
// named skip at the top (a replica's log without the master's AMQP
// files).
func copyTree(t *testing.T, src, dst, skip string) {
	t.Helper()
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		if rel == skip {
			return filepath.SkipDir
		}
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		in, err := os.Open(path)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.Create(filepath.Join(dst, rel))
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, in); err != nil {
			out.Close()
			return err
		}
		return out.Close()
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestReplicatedStateServesAfterAMasterCrash: what a master serving
// slaves logs of its AMQP state is, applied by a Mirror to another
// directory holding the same log, everything a new master needs after a
// kill -9 of the old one: the durable exchange, its binding and the
// durable queue with its arguments (a deleted queue stays deleted), the
// queue's messages, the acknowledged ones not delivered again and the
// unacknowledged ones delivered again with redelivered=true.
func TestReplicatedStateServesAfterAMasterCrash(t *testing.T) {
	b := &broker{t: t, dir: t.TempDir(), systemRecords: true}
	b.start()
	t.Cleanup(b.stop)
	ch := b.channel()
	if err := ch.ExchangeDeclare("shop", "direct", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	args := amqp091.Table{"x-max-length": int32(1000)}
	if _, err := ch.QueueDeclare("orders", true, false, false, false, args); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind("orders", "new", "shop", false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare("gone", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDelete("gone", false, false, false); err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		dc, err := ch.PublishWithDeferredConfirm("shop", "new", false, false, amqp091.Publishing{DeliveryMode: amqp091.Persistent, Body: []byte(fmt.Sprint(i))})
		if err != nil {
			t.Fatal(err)
		}
		if !dc.Wait() {
			t.Fatalf("publish %d nacked", i)
		}
	}
	cch := b.channel()
	if err := cch.Qos(10, 0, false); err != nil {
		t.Fatal(err)
	}
	ds, err := cch.Consume("orders", "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		d := recv(t, ds)
		if string(d.Body) != fmt.Sprint(i) || d.Redelivered {
			t.Fatalf("delivery %d: %q redelivered=%v", i, d.Body, d.Redelivered)
		}
		if i < 4 {
			if err := d.Ack(false); err != nil {
				t.Fatal(err)
			}
		}
	}
	q := b.srv.vhosts["/"].queue("orders")
	waitUntil(t, "the four acks in acks.json", func() bool { return q.savedFloor.Load() == 4 })
	waitUntil(t, "every record dispatched", func() bool { return b.st.VisibleOffset() >= b.st.Offset(store.Written) })

	// The replica's side: its Mirror applies the records of its log.
	replica := t.TempDir()
	m, err := NewMirror(nil, replica, nil)
	if err != nil {
		t.Fatal(err)
	}
	if p, ok := m.SnapshotPoint(); ok {
		t.Fatalf("a new directory has the point %d", p)
	}
	kinds := map[record.Kind]int{}
	end, err := b.st.SubscribeSystem(0, func(phys, end int64, body []byte) error {
		r, err := record.DecodeSystem(body)
		if err != nil {
			return err
		}
		if !m.Owns(r.Kind) {
			return nil
		}
		kinds[r.Kind]++
		return m.Apply(phys, end, r)
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Replayed(end); err != nil {
		t.Fatal(err)
	}
	for _, k := range []record.Kind{record.KindAMQPQueues, record.KindAMQPExchanges, record.KindAMQPAcks} {
		if kinds[k] == 0 {
			t.Errorf("no %v record in the log", k)
		}
	}
	b.st.SubscribeSystem(end, func(int64, int64, []byte) error { return nil })

	// kill -9 of the master: nothing more of its state is written; the
	// replica has the same log.
	b.crash()
	copyTree(t, b.dir, replica, "amqp")
	nb := &broker{t: t, dir: replica}
	nb.start()
	t.Cleanup(nb.stop)
	nch := nb.channel()
	if _, err := nch.QueueDeclarePassive("gone", true, false, false, false, nil); err == nil {
		t.Fatal("the deleted queue is back on the new master")
	}
	nch = nb.channel()
	if _, err := nch.QueueDeclare("orders", true, false, false, false, args); err != nil {
		t.Fatalf("redeclare with the same arguments: %v", err)
	}
	if _, err := nch.QueueDeclare("orders", true, false, false, false, amqp091.Table{"x-max-length": int32(5)}); err == nil {
		t.Fatal("the queue's arguments were not replicated: a redeclare with others was accepted")
	}
	nch = nb.channel()
	if err := nch.Qos(20, 0, false); err != nil {
		t.Fatal(err)
	}
	nds, err := nch.Consume("orders", "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 4; i < 10; i++ {
		d := recv(t, nds)
		if string(d.Body) != fmt.Sprint(i) || !d.Redelivered {
			t.Fatalf("after the failover: %q redelivered=%v, want %d redelivered", d.Body, d.Redelivered, i)
		}
		d.Ack(false)
	}
	pch := nb.channel()
	if err := pch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	dc, err := pch.PublishWithDeferredConfirm("shop", "new", false, false, amqp091.Publishing{DeliveryMode: amqp091.Persistent, Body: []byte("after")})
	if err != nil || !dc.Wait() {
		t.Fatalf("publish through the replicated binding: %v", err)
	}
	// Its redelivered flag may be set: it is below the old master's
	// delivery lease, as after a crash of one broker (doc.go).
	if d := recv(t, nds); string(d.Body) != "after" {
		t.Fatalf("got %q, want the new message", d.Body)
	}
	none(t, nch, nds, "orders")
}

// mirrorRecords are records of one vhost at made-up log positions: a
// queue, an exchange, acknowledgement states (one with a lease) and a
// second queue deleted again.
func mirrorRecords() []struct {
	phys, end int64
	r         *record.SystemRecord
} {
	q := func(name, topic string) []byte { b, _ := json.Marshal(queueDef{Name: name, Topic: topic}); return b }
	a := func(e ackEntry) []byte { b, _ := json.Marshal(e); return b }
	return []struct {
		phys, end int64
		r         *record.SystemRecord
	}{
		{100, 150, &record.SystemRecord{Kind: record.KindAMQPQueues, Vhost: "/", Configs: []record.ConfigEntry{{Name: "a", Config: q("a", "%AMQP%a")}, {Name: "b", Config: q("b", "%AMQP%b")}}}},
		{200, 260, &record.SystemRecord{Kind: record.KindAMQPExchanges, Vhost: "/", Configs: []record.ConfigEntry{{Name: "x", Config: []byte(`{"name":"x","type":"fanout","bindings":[{"queue":"a","key":""}]}`)}}}},
		{300, 350, &record.SystemRecord{Kind: record.KindAMQPAcks, Vhost: "/", Configs: []record.ConfigEntry{{Name: "%AMQP%a", Config: a(ackEntry{ackDef: ackDef{Floor: 2, Settled: []int64{4}, Delivered: 6, Returns: map[int64]int32{3: 1}}})}}}},
		{400, 450, &record.SystemRecord{Kind: record.KindAMQPAcks, Vhost: "/", Configs: []record.ConfigEntry{{Name: "%AMQP%a", Config: a(ackEntry{ackDef: ackDef{Floor: 3, Settled: []int64{5}, Delivered: 7}, Lease: 263})}}}},
		{500, 540, &record.SystemRecord{Kind: record.KindAMQPQueues, Vhost: "/", Configs: []record.ConfigEntry{{Name: "b"}}}},
		{600, 640, &record.SystemRecord{Kind: record.KindAMQPQueues, Vhost: "v2", Configs: []record.ConfigEntry{{Name: "c", Config: q("c", "%AMQP%c")}}}},
	}
}

func readAll(t *testing.T, fsys vfs.FS, paths ...string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, p := range paths {
		var raw json.RawMessage
		if err := readJSON(fsys, p, &raw); err != nil {
			t.Fatal(err)
		}
		out[p] = string(raw)
	}
	return out
}

var mirrorFiles = []string{"/d/amqp/queues.json", "/d/amqp/exchanges.json", "/d/amqp/acks.json", "/d/amqp/lease-%AMQP%a", "/d/amqp/logpoint.json",
	"/d/amqp/vhosts/7632/queues.json"}

// TestMirrorAppliesAndReplays: the Mirror's files after the records; the
// acknowledgement states merged (floor, settled, delivered raised to the
// lease, returns of unsettled offsets); a deleted queue's state dropped;
// and a replay from an older point (the files were written, the point
// file not, as after a crash between them), or of the acknowledgement
// records in another order, ends in the same files.
func TestMirrorAppliesAndReplays(t *testing.T) {
	mem := vfs.NewMem()
	m, err := NewMirror(mem, "/d", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range mirrorRecords() {
		if err := m.Apply(x.phys, x.end, x.r); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.Flush(); err != nil {
		t.Fatal(err)
	}
	want := readAll(t, mem, mirrorFiles...)
	if got := want["/d/amqp/logpoint.json"]; got != `{"keelLogOffset":640}` {
		t.Errorf("point file %s, want 640", got)
	}
	var acks map[string]ackDef
	json.Unmarshal([]byte(want["/d/amqp/acks.json"]), &acks)
	if a := acks["%AMQP%a"]; a.Floor != 3 || fmt.Sprint(a.Settled) != "[4 5]" || a.Delivered != 7 || fmt.Sprint(a.Returns) != "map[3:1]" {
		t.Errorf("merged state %+v, want floor 3, settled [4 5], delivered 7, the return of unsettled offset 3", a)
	}
	if l, err := readLease(mem, "/d/amqp/lease-%AMQP%a"); err != nil || l != 263 {
		t.Errorf("lease file %d %v, want the logged lease 263", l, err)
	}
	if _, ok := acks["%AMQP%b"]; ok || strings.Contains(want["/d/amqp/queues.json"], `"b"`) {
		t.Errorf("the deleted queue is still there: %s %v", want["/d/amqp/queues.json"], acks)
	}

	// The point file lost (older point): the replay applies the records
	// from there again, to the same files.
	if err := vfs.WriteFileDurable(mem, "/d/amqp/logpoint.json", []byte(`{"keelLogOffset":300}`), 0o644); err != nil {
		t.Fatal(err)
	}
	m2, err := NewMirror(mem, "/d", nil)
	if err != nil {
		t.Fatal(err)
	}
	if p, ok := m2.SnapshotPoint(); !ok || p != 300 {
		t.Fatalf("point %d (%v), want 300", p, ok)
	}
	// Opened from the files (every vhost's): the floors hold the
	// replica's retention.
	if h := fmt.Sprint(m2.Holds()); h != "map[%AMQP%a:map[0:3] %AMQP%c:map[0:0]]" {
		t.Errorf("holds %s, want queue a's floor 3 and queue c's (vhost v2) 0", h)
	}
	recs := mirrorRecords()
	recs[2], recs[3] = recs[3], recs[2] // acknowledgement records out of order
	for _, x := range recs {
		if err := m2.Apply(x.phys, x.end, x.r); err != nil {
			t.Fatal(err)
		}
	}
	if err := m2.Replayed(700); err != nil {
		t.Fatal(err)
	}
	got := readAll(t, mem, mirrorFiles...)
	for _, p := range mirrorFiles[:4] {
		if got[p] != want[p] {
			t.Errorf("%s after the replay:\n%s\nwant\n%s", p, got[p], want[p])
		}
	}
	if got["/d/amqp/logpoint.json"] != `{"keelLogOffset":700}` {
		t.Errorf("point after the replay: %s, want 700", got["/d/amqp/logpoint.json"])
	}
}

// failRename fails renames into place of files ending in target.
type failRename struct {
	vfs.FS
	target string
}

var errRename = errors.New("rename refused")

func (f *failRename) Rename(oldname, newname string) error {
	if f.target != "" && strings.HasSuffix(newname, f.target) {
		return errRename
	}
	return f.FS.Rename(oldname, newname)
}

// TestMirrorPointFollowsItsFiles: a file the Mirror could not write
// keeps the point where it was (the next start replays the records
// again), and a power loss after that loses nothing the point covers;
// the next Flush writes it.
func TestMirrorPointFollowsItsFiles(t *testing.T) {
	mem := vfs.NewMem()
	fsys := &failRename{FS: mem}
	m, err := NewMirror(fsys, "/d", nil)
	if err != nil {
		t.Fatal(err)
	}
	recs := mirrorRecords()
	m.Apply(recs[0].phys, recs[0].end, recs[0].r)
	if err := m.Flush(); err != nil {
		t.Fatal(err)
	}
	m.Apply(recs[1].phys, recs[1].end, recs[1].r)
	fsys.target = "exchanges.json"
	if err := m.Flush(); !errors.Is(err, errRename) {
		t.Fatalf("Flush with exchanges.json refused: %v", err)
	}
	mem.Crash()
	m2, err := NewMirror(mem, "/d", nil)
	if err != nil {
		t.Fatal(err)
	}
	if p, _ := m2.SnapshotPoint(); p != recs[0].end {
		t.Fatalf("point after the failed write and a crash: %d, want %d (the last one written with its files)", p, recs[0].end)
	}
	fsys.target = ""
	if err := m.Flush(); err != nil {
		t.Fatal(err)
	}
	var exs []exchangeDef
	if err := readJSON(mem, "/d/amqp/exchanges.json", &exs); err != nil || len(exs) != 1 || exs[0].Name != "x" {
		t.Fatalf("exchanges.json after the retried flush: %+v %v", exs, err)
	}
	// A record the log already had before the point is not applied again.
	m3, _ := NewMirror(mem, "/d", nil)
	if err := m3.Apply(recs[0].phys, recs[0].end, &record.SystemRecord{Kind: record.KindAMQPQueues, Vhost: "/", Configs: []record.ConfigEntry{{Name: "a"}}}); err != nil {
		t.Fatal(err)
	}
	if err := m3.Flush(); err != nil {
		t.Fatal(err)
	}
	var qs []queueDef
	readJSON(mem, "/d/amqp/queues.json", &qs)
	if len(qs) != 2 {
		t.Fatalf("a record before the point was applied: %+v", qs)
	}
}

// TestMirrorRefusesBadEntries: an entry that is not a definition or a
// state stops the apply (the store then stops: never a skip).
func TestMirrorRefusesBadEntries(t *testing.T) {
	m, _ := NewMirror(vfs.NewMem(), "/d", nil)
	for _, r := range []*record.SystemRecord{
		{Kind: record.KindAMQPQueues, Vhost: "/", Configs: []record.ConfigEntry{{Name: "a", Config: []byte(`{"name":"other","topic":"t"}`)}}},
		{Kind: record.KindAMQPQueues, Vhost: "/", Configs: []record.ConfigEntry{{Name: "a", Config: []byte(`nope`)}}},
		{Kind: record.KindAMQPExchanges, Vhost: "/", Configs: []record.ConfigEntry{{Name: "x", Config: []byte(`[]`)}}},
		{Kind: record.KindAMQPAcks, Vhost: "/", Configs: []record.ConfigEntry{{Name: "t"}}},
	} {
		if err := m.Apply(10, 20, r); err == nil {
			t.Errorf("%v %s accepted", r.Kind, bytes.TrimSpace(r.Configs[0].Config))
		}
	}
}

// TestMirrorOnAnEarlierReleasesDirectory: files written by an earlier
// release (no snapshot point) are kept as they are; the first start
// writes the point (the end of its replay) and nothing else, and the
// queues they hold are held against retention.
func TestMirrorOnAnEarlierReleasesDirectory(t *testing.T) {
	mem := vfs.NewMem()
	queues := `[{"name":"old","topic":"%AMQP%old"}]`
	acks := `{"%AMQP%old":{"floor":7,"delivered":9}}`
	for path, data := range map[string]string{"/d/amqp/queues.json": queues, "/d/amqp/acks.json": acks} {
		if err := vfs.MkdirAllDurable(mem, "/d/amqp", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := vfs.WriteFileDurable(mem, path, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	m, err := NewMirror(mem, "/d", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := m.SnapshotPoint(); ok {
		t.Fatal("a directory without logpoint.json has a point")
	}
	if h := fmt.Sprint(m.Holds()); h != "map[%AMQP%old:map[0:7]]" {
		t.Errorf("holds %s, want the old queue's floor 7", h)
	}
	if err := m.Replayed(4096); err != nil {
		t.Fatal(err)
	}
	got := readAll(t, mem, "/d/amqp/queues.json", "/d/amqp/acks.json", "/d/amqp/logpoint.json")
	if got["/d/amqp/queues.json"] != queues || got["/d/amqp/acks.json"] != acks {
		t.Errorf("the earlier release's files were rewritten: %v", got)
	}
	if got["/d/amqp/logpoint.json"] != `{"keelLogOffset":4096}` {
		t.Errorf("point %s, want 4096", got["/d/amqp/logpoint.json"])
	}
}

// TestReplicatedLeaseFlagsDeliveries: deliveries made after the last
// write of the acknowledgement state (here: none is written, the
// interval is an hour) are covered by the lease the master logged
// before them, so the new master flags them redelivered.
func TestReplicatedLeaseFlagsDeliveries(t *testing.T) {
	b := &broker{t: t, dir: t.TempDir(), systemRecords: true, ackInterval: time.Hour}
	b.start()
	t.Cleanup(b.stop)
	ch := b.channel()
	if _, err := ch.QueueDeclare("held", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	publishConfirmed(t, ch, "held", "a", "b", "c")
	ds, err := ch.Consume("held", "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if d := recv(t, ds); d.Redelivered {
			t.Fatalf("first delivery of %q flagged", d.Body)
		}
	}
	waitUntil(t, "every record dispatched", func() bool { return b.st.VisibleOffset() >= b.st.Offset(store.Written) })
	replica := t.TempDir()
	m, err := NewMirror(nil, replica, nil)
	if err != nil {
		t.Fatal(err)
	}
	end, err := b.st.SubscribeSystem(0, func(phys, end int64, body []byte) error {
		r, err := record.DecodeSystem(body)
		if err != nil || !m.Owns(r.Kind) {
			return err
		}
		return m.Apply(phys, end, r)
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Replayed(end); err != nil {
		t.Fatal(err)
	}
	b.st.SubscribeSystem(end, func(int64, int64, []byte) error { return nil })
	b.crash()
	copyTree(t, b.dir, replica, "amqp")
	nb := &broker{t: t, dir: replica}
	nb.start()
	t.Cleanup(nb.stop)
	nds, err := nb.channel().Consume("held", "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"a", "b", "c"} {
		if d := recv(t, nds); string(d.Body) != want || !d.Redelivered {
			t.Fatalf("after the failover: %q redelivered=%v, want %q redelivered", d.Body, d.Redelivered, want)
		}
	}
}

// mirrorOf replays b's log into a Mirror of a new directory and returns
// the directory.
func mirrorOf(t *testing.T, b *broker) string {
	t.Helper()
	waitUntil(t, "every record dispatched", func() bool { return b.st.VisibleOffset() >= b.st.Offset(store.Written) })
	dir := t.TempDir()
	m, err := NewMirror(nil, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	end, err := b.st.SubscribeSystem(0, func(phys, end int64, body []byte) error {
		r, err := record.DecodeSystem(body)
		if err != nil || !m.Owns(r.Kind) {
			return err
		}
		return m.Apply(phys, end, r)
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Replayed(end); err != nil {
		t.Fatal(err)
	}
	b.st.SubscribeSystem(end, func(int64, int64, []byte) error { return nil })
	return dir
}

// TestReplicatedLeaseTrim: the lease trimmed at a clean shutdown is
// logged too, so a new master flags exactly the messages handed out
// before (not the ones below the lease that were never delivered).
func TestReplicatedLeaseTrim(t *testing.T) {
	b := &broker{t: t, dir: t.TempDir(), systemRecords: true}
	b.start()
	t.Cleanup(b.stop)
	ch := b.channel()
	if _, err := ch.QueueDeclare("trim", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	publishConfirmed(t, ch, "trim", "a", "b", "c")
	ds, err := ch.Consume("trim", "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		recv(t, ds)
	}
	b.stop() // clean: the deliveries go back, the lease is trimmed to 3
	b.start()
	replica := mirrorOf(t, b)
	b.crash()
	copyTree(t, b.dir, replica, "amqp")
	nb := &broker{t: t, dir: replica}
	nb.start()
	t.Cleanup(nb.stop)
	nch := nb.channel()
	publishConfirmed(t, nch, "trim", "d")
	nds, err := nch.Consume("trim", "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"a", "b", "c", "d"} {
		d := recv(t, nds)
		if string(d.Body) != want || d.Redelivered != (want != "d") {
			t.Fatalf("after the switch-over: %q redelivered=%v, want %q redelivered=%v", d.Body, d.Redelivered, want, want != "d")
		}
	}
}

// TestMirrorDeletesADeletedQueuesTopic: on a replica the Mirror has the
// store delete the topic of each deleted queue, as the master did, at
// the record's end, but never a Keel topic a queue was declared over.
func TestMirrorDeletesADeletedQueuesTopic(t *testing.T) {
	m, _ := NewMirror(vfs.NewMem(), "/d", nil)
	var deleted []string
	m.DeleteTopic = func(topic string, end int64) error {
		deleted = append(deleted, fmt.Sprintf("%s@%d", topic, end))
		return nil
	}
	var w wire.Writer
	w.Table(wire.Table{ArgKeelTopic: "orders"})
	over, _ := json.Marshal(queueDef{Name: "over", Topic: "orders", Args: w.Buf})
	own, _ := json.Marshal(queueDef{Name: "own", Topic: "%AMQP%01"})
	again, _ := json.Marshal(queueDef{Name: "own", Topic: "%AMQP%02"})
	for i, r := range []*record.SystemRecord{
		{Kind: record.KindAMQPQueues, Vhost: "/", Configs: []record.ConfigEntry{{Name: "over", Config: over}, {Name: "own", Config: own}}},
		{Kind: record.KindAMQPQueues, Vhost: "/", Configs: []record.ConfigEntry{{Name: "over"}, {Name: "own", Config: again}}},
		{Kind: record.KindAMQPQueues, Vhost: "/", Configs: []record.ConfigEntry{{Name: "own"}}},
	} {
		if err := m.Apply(int64(100*i), int64(100*i+50), r); err != nil {
			t.Fatal(err)
		}
	}
	if got := fmt.Sprint(deleted); got != "[%AMQP%01@150 %AMQP%02@250]" {
		t.Fatalf("deleted %s, want the own topics at their records' ends (the Keel topic kept)", got)
	}
}
