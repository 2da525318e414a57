package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/store/commitlog"
	"github.com/keelmq/keel/internal/vfs"
)

// tagFilter matches a set of tags like a TAG subscription.
type tagFilter struct{ tags []string }

func (f tagFilter) MatchTagsCode(code int64) bool {
	return slices.ContainsFunc(f.tags, func(t string) bool { return message.TagsCode(t) == code })
}

func (f tagFilter) MatchRecord(v message.View) bool {
	return slices.Contains(f.tags, string(v.Tags()))
}

// collidingFilter matches every tag code (as a hash collision would) but
// only the exact tag on the record.
type collidingFilter struct{ tag string }

func (collidingFilter) MatchTagsCode(int64) bool          { return true }
func (f collidingFilter) MatchRecord(v message.View) bool { return string(v.Tags()) == f.tag }

func TestGetStatuses(t *testing.T) {
	s := mustOpen(t, testConfig(vfs.NewMem()))
	defer s.Close()
	for i := range 5 {
		put(t, s, newMsg("T", 0, fmt.Sprint(i), nil))
	}
	waitVisible(t, s, "T", 0, 5)
	cases := []struct {
		topic  string
		qid    int32
		offset int64
		want   GetStatus
		next   int64
		n      int
	}{
		{"nope", 0, 0, NoMatchedLogicQueue, 0, 0},
		{"T", 1, 0, NoMatchedLogicQueue, 0, 0},
		{"T", 0, 5, OffsetOverflowOne, 5, 0},
		{"T", 0, 9, OffsetOverflowBadly, 5, 0},
		{"T", 0, 0, Found, 5, 5},
		{"T", 0, 3, Found, 5, 2},
	}
	for _, c := range cases {
		r, err := s.GetMessage(c.topic, c.qid, c.offset, 32, 1<<20, nil)
		if err != nil {
			t.Fatal(err)
		}
		if r.Status != c.want || r.NextOffset != c.next || len(r.Records) != c.n {
			t.Errorf("%s/%d@%d: %v next %d n %d, want %v %d %d", c.topic, c.qid, c.offset, r.Status, r.NextOffset, len(r.Records), c.want, c.next, c.n)
		}
		r.Release()
	}
	// Max count and max bytes (always at least one message).
	r, _ := s.GetMessage("T", 0, 0, 2, 1<<20, nil)
	if len(r.Records) != 2 || r.NextOffset != 2 {
		t.Fatalf("maxCount: %d next %d", len(r.Records), r.NextOffset)
	}
	r, _ = s.GetMessage("T", 0, 1, 32, 1, nil)
	if len(r.Records) != 1 || r.NextOffset != 2 || r.Status != Found {
		t.Fatalf("maxBytes: %d next %d", len(r.Records), r.NextOffset)
	}
	size := len(r.Records[0])
	r, _ = s.GetMessage("T", 0, 0, 32, 3*size, nil)
	if len(r.Records) != 3 || r.TotalBytes != 3*size {
		t.Fatalf("maxBytes 3 records: got %d", len(r.Records))
	}
}

func TestGetStatusesAfterRetention(t *testing.T) {
	clock := newFakeClock()
	cfg := testConfig(vfs.NewMem())
	cfg.Now = clock.Now
	s := mustOpen(t, cfg)
	defer s.Close()
	put(t, s, newMsg("E", 0, "x", nil)) // makes queue E/0 exist
	waitVisible(t, s, "E", 0, 1)
	body := string(make([]byte, 4000))
	for range 40 {
		put(t, s, newMsg("T", 0, body, nil))
	}
	clock.Add(cfg.FileReservedTime + time.Hour)
	for range 3 {
		put(t, s, newMsg("T", 0, body, nil))
	}
	waitVisible(t, s, "T", 0, 43)
	clock.Set(time.Date(2026, 1, 6, 4, 30, 0, 0, time.Local)) // DeleteWhen "04"
	flushAll(t, s)
	s.runRetentionOnce()
	lo := s.MinOffset("T", 0)
	if lo == 0 || s.log.MinOffset() == 0 {
		t.Fatalf("retention removed nothing: min %d, log min %d", lo, s.log.MinOffset())
	}
	r, _ := s.GetMessage("T", 0, 0, 32, 1<<20, nil)
	if r.Status != OffsetTooSmall || r.NextOffset != lo {
		t.Fatalf("below min: %v next %d, want OFFSET_TOO_SMALL %d", r.Status, r.NextOffset, lo)
	}
	r, _ = s.GetMessage("T", 0, lo, 32, 1<<20, nil)
	if r.Status != Found || message.View(r.Records[0]).QueueOffset() != lo {
		t.Fatalf("at min: %v", r.Status)
	}
	// The queue of E lost its only message: it is empty but not unknown.
	r, _ = s.GetMessage("E", 0, 0, 32, 1<<20, nil)
	if r.Status == Found {
		t.Fatalf("E/0 message survived retention: %v", r.Status)
	}
}

// flushAll makes everything written durable and dispatched.
func flushAll(t testing.TB, s *Store) {
	t.Helper()
	if err := s.log.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := s.dispatchAvailable(); err != nil {
		t.Fatal(err)
	}
}

func TestNoMessageInQueue(t *testing.T) {
	s := mustOpen(t, testConfig(vfs.NewMem()))
	defer s.Close()
	if _, err := s.openQueue("Empty", 0); err != nil {
		t.Fatal(err)
	}
	r, _ := s.GetMessage("Empty", 0, 3, 32, 1<<20, nil)
	if r.Status != NoMessageInQueue || r.NextOffset != 0 {
		t.Fatalf("got %v %d", r.Status, r.NextOffset)
	}
}

func TestTagFiltering(t *testing.T) {
	s := mustOpen(t, testConfig(vfs.NewMem()))
	defer s.Close()
	tags := []string{"A", "B", "", "A", "C", "B", "A"}
	for i, tag := range tags {
		props := map[string]string{}
		if tag != "" {
			props["TAGS"] = tag
		}
		put(t, s, newMsg("T", 0, fmt.Sprint(i), props))
	}
	waitVisible(t, s, "T", 0, int64(len(tags)))
	r, _ := s.GetMessage("T", 0, 0, 32, 1<<20, tagFilter{[]string{"A"}})
	if r.Status != Found || fmt.Sprint(bodies(r)) != "[0 3 6]" || r.NextOffset != 7 {
		t.Fatalf("tag A: %v %v next %d", r.Status, bodies(r), r.NextOffset)
	}
	r, _ = s.GetMessage("T", 0, 0, 2, 1<<20, tagFilter{[]string{"B", "C"}})
	if fmt.Sprint(bodies(r)) != "[1 4]" || r.NextOffset != 5 {
		t.Fatalf("tags B||C: %v next %d", bodies(r), r.NextOffset)
	}
	r, _ = s.GetMessage("T", 0, 0, 32, 1<<20, tagFilter{[]string{"Z"}})
	if r.Status != NoMatchedMessage || r.NextOffset != 7 {
		t.Fatalf("no match: %v next %d", r.Status, r.NextOffset)
	}
	// The tag code matches everything; the record check keeps only C.
	r, _ = s.GetMessage("T", 0, 0, 32, 1<<20, collidingFilter{"C"})
	if fmt.Sprint(bodies(r)) != "[4]" {
		t.Fatalf("collision: %v", bodies(r))
	}
}

func TestBatchesAndSegmentRollover(t *testing.T) {
	s := mustOpen(t, testConfig(vfs.NewMem()))
	defer s.Close()
	var batch []*message.Message
	for i := range 8 {
		batch = append(batch, newMsg("B", 1, fmt.Sprintf("%d-%s", i, make([]byte, 3000)), nil))
	}
	for range 12 {
		if r := s.PutMessages(context.Background(), batch); r.Status != PutOK {
			t.Fatal(r.Err)
		}
		for i, m := range batch {
			if i > 0 && m.QueueOffset != batch[i-1].QueueOffset+1 {
				t.Fatal("batch offsets are not dense")
			}
		}
	}
	if len(s.log.Segments()) < 5 {
		t.Fatalf("want several segments, got %d", len(s.log.Segments()))
	}
	waitVisible(t, s, "B", 1, 96)
	for off := int64(0); off < 96; {
		r, err := s.GetMessage("B", 1, off, 7, 1<<20, nil)
		if err != nil || r.Status != Found {
			t.Fatal(r.Status, err)
		}
		for i, rec := range r.Records {
			if want := fmt.Sprintf("%d-", (off+int64(i))%8); string(message.View(rec).Body()[:len(want)]) != want {
				t.Fatalf("offset %d: wrong body", off+int64(i))
			}
		}
		off = r.NextOffset
		r.Release()
	}
	// A batch bigger than half a segment is refused without writing.
	var huge []*message.Message
	for range 10 {
		huge = append(huge, newMsg("B", 1, string(make([]byte, 4000)), nil))
	}
	if r := s.PutMessages(context.Background(), huge); r.Status != PutMessageIllegal {
		t.Fatalf("huge batch: %v", r.Status)
	}
}

func TestPutRejectsBadMessages(t *testing.T) {
	s := mustOpen(t, testConfig(vfs.NewMem()))
	defer s.Close()
	long := string(make([]byte, 200))
	cases := map[*message.Message]PutStatus{
		newMsg("", 0, "x", nil):                            PutMessageIllegal,
		newMsg(long[:128], 0, "x", nil):                    PutMessageIllegal,
		newMsg("T", -1, "x", nil):                          PutMessageIllegal,
		newMsg("T", 0, string(make([]byte, 8<<10+1)), nil): PutMessageIllegal,
	}
	for m, want := range cases {
		if r := s.PutMessage(context.Background(), m); r.Status != want || r.Err == nil {
			t.Errorf("%q/%d: %v %v", m.Topic, m.QueueID, r.Status, r.Err)
		}
	}
	m := newMsg("T", 0, "x", nil)
	m.Properties = string(make([]byte, message.MaxPropertiesBytes+1))
	if r := s.PutMessage(context.Background(), m); r.Status != PutPropertiesTooLong {
		t.Errorf("long properties: %v", r.Status)
	}
	if s.log.WrittenOffset() != 0 {
		t.Fatal("a refused message was written")
	}
}

func TestLookMessageByOffsetAndQueryByKey(t *testing.T) {
	s := mustOpen(t, testConfig(vfs.NewMem()))
	defer s.Close()
	m1 := newMsg("T", 0, "one", map[string]string{"KEYS": "order-1 customer-9", "UNIQ_KEY": "U1"})
	m2 := newMsg("T", 0, "two", map[string]string{"KEYS": "order-2", "UNIQ_KEY": "U2"})
	m3 := newMsg("Other", 0, "three", map[string]string{"KEYS": "order-1"})
	put(t, s, m1)
	put(t, s, m2)
	put(t, s, m3)
	waitVisible(t, s, "Other", 0, 1)
	rec, err := s.LookMessageByOffset(m2.PhysOffset)
	if err != nil || string(message.View(rec).Body()) != "two" {
		t.Fatalf("look: %v", err)
	}
	if _, err := s.LookMessageByOffset(m2.PhysOffset + 1); err == nil {
		t.Fatal("look at a non-record offset succeeded")
	}
	if _, err := s.LookMessageByOffset(s.log.WrittenOffset() + 100); !errors.Is(err, commitlog.ErrBeyondEnd) {
		t.Fatalf("look past the end: %v", err)
	}
	for key, want := range map[string][]int64{
		"order-1": {m1.PhysOffset}, "customer-9": {m1.PhysOffset}, "U2": {m2.PhysOffset}, "order-3": nil,
	} {
		got, err := s.QueryByKey("T", key, 10, 0, 1<<62)
		if err != nil || fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("key %s: %v %v, want %v", key, got, err, want)
		}
	}
	got, _ := s.QueryByKey("Other", "order-1", 10, 0, 1<<62)
	if fmt.Sprint(got) != fmt.Sprint([]int64{m3.PhysOffset}) {
		t.Errorf("Other: %v", got)
	}
}

func TestOffsetByTime(t *testing.T) {
	clock := newFakeClock()
	cfg := testConfig(vfs.NewMem())
	cfg.Now = clock.Now
	s := mustOpen(t, cfg)
	defer s.Close()
	start := clock.Now()
	for i := range 10 {
		put(t, s, newMsg("T", 0, fmt.Sprint(i), nil))
		clock.Add(time.Second)
	}
	waitVisible(t, s, "T", 0, 10)
	ms := func(d time.Duration) int64 { return start.Add(d).UnixMilli() }
	for ts, want := range map[int64]int64{
		ms(-time.Hour): 0, ms(0): 0, ms(500 * time.Millisecond): 1, ms(3 * time.Second): 3, ms(9 * time.Second): 9, ms(time.Hour): 10,
	} {
		if got := s.OffsetByTime("T", 0, ts); got != want {
			t.Errorf("OffsetByTime(%d) = %d, want %d", ts-ms(0), got, want)
		}
	}
	if ts, err := s.EarliestStoreTime("T", 0); err != nil || ts != ms(0) {
		t.Fatalf("earliest: %d %v", ts, err)
	}
	if got := s.Queues("T"); fmt.Sprint(got) != "[0]" {
		t.Fatalf("queues %v", got)
	}
}

func TestDispatchListenerAndDeleteTopic(t *testing.T) {
	fs := vfs.NewMem()
	cfg := testConfig(fs)
	s := mustOpen(t, cfg)
	got := make(chan string, 10)
	s.OnVisible(func(topic string, qid int32, qo, code int64) {
		got <- fmt.Sprintf("%s/%d@%d:%d", topic, qid, qo, code)
	})
	put(t, s, newMsg("D", 2, "x", map[string]string{"TAGS": "A"}))
	if g := <-got; g != fmt.Sprintf("D/2@0:%d", message.TagsCode("A")) {
		t.Fatalf("listener got %s", g)
	}
	put(t, s, newMsg("Keep", 0, "k", nil))
	<-got
	if err := s.DeleteTopic("D"); err != nil {
		t.Fatal(err)
	}
	if s.MaxOffset("D", 2) != 0 || len(s.Queues("D")) != 0 {
		t.Fatal("topic still visible")
	}
	m := newMsg("D", 2, "again", nil)
	put(t, s, m)
	if m.QueueOffset != 0 {
		t.Fatalf("recreated topic starts at %d", m.QueueOffset)
	}
	<-got
	s.Close()
	// After a crash-free restart the deleted messages stay deleted.
	s = mustOpen(t, cfg)
	defer s.Close()
	r, _ := s.GetMessage("D", 2, 0, 32, 1<<20, nil)
	if fmt.Sprint(bodies(r)) != "[again]" || s.MaxOffset("Keep", 0) != 1 {
		t.Fatalf("after restart: %v", bodies(r))
	}
}

// TestReadRacingRetention: retention may remove the head of a queue between
// GetMessage reading the queue's bounds and reading its entries. The read
// then answers OFFSET_TOO_SMALL with the new min offset, not an error (a
// pull got SYSTEM_ERROR when the disk passed DiskMaxUsedSpaceRatio during a
// backlog drain).
func TestReadRacingRetention(t *testing.T) {
	s, mem := openFourSegments(t)
	defer s.Close()
	waitVisible(t, s, "T", 0, 60)
	q := s.lookupQueue("T", 0)
	hi := q.MaxOffset()
	// As in the window: GetMessage saw min 0, then retention ran.
	total, free, _ := mem.DiskUsage("/data")
	mem.SetCapacity((total - free) * 100 / 80) // above DiskMaxUsedSpaceRatio: oldest segments go
	s.runRetentionOnce()
	lo := q.MinOffset()
	if lo == 0 {
		t.Fatal("setup: retention removed nothing from the queue")
	}
	r := &GetResult{lent: &s.stats.readsLent}
	if err := s.readQueue(q, "T", 0, 0, hi, 32, 1<<20, nil, r); err != nil {
		t.Fatalf("read from offset 0 after retention: %v", err)
	}
	defer r.Release()
	if r.Status != OffsetTooSmall || r.NextOffset != lo || r.MinOffset != lo || len(r.Records) != 0 {
		t.Fatalf("status %v next %d min %d records %d; want OFFSET_TOO_SMALL, next and min %d, none", r.Status, r.NextOffset, r.MinOffset, len(r.Records), lo)
	}
}
