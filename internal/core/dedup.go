package core

// De-duplication of sends, the one path for single messages and batches:
// the front door checks a send with CheckDuplicate (one message) or
// CheckBatchDuplicates (a batch), stores what the check leaves to store
// (Dedup.Store), and then calls Dedup.Finish exactly once with the put's
// result, or Dedup.Abort if the send failed before anything was handed to
// the store or an engine. Every key checked is released exactly once
// either way, so a concurrent send of the same key never waits for ever.
//
// A single message is checked when its UNIQ_KEY came from the client (not
// one the broker made). A batch is checked message by message when every
// item carries a UNIQ_KEY (as the Java client's batches do; the Go
// client's batch items carry none, so its batches are never checked).
// Each distinct key of a batch is checked once, in sorted order (two
// batches sharing keys cannot wait for each other in a cycle); a key
// repeated inside the batch is stored once. Items already stored within
// the window are not stored again; the others are stored with one append;
// the response lists every item's offset message ID in order, the original
// ones for duplicates, and the queueId / queueOffset of the first item (the
// front door's send response).

import (
	"context"
	"sort"

	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/store"
)

// Dedup is a send checked against the Deduplicator.
type Dedup struct {
	Result []*message.Message // per item: what the response reports (the original for a duplicate)
	Store  []*message.Message // items to store (none: every item is a duplicate)
	// releases[j] records the stored message of item relItem[j].
	releases []func(*message.Message, store.PutResult)
	relItem  []int
	// A single message's slices share these, so that its check makes one
	// allocation, not five.
	one    [1]*message.Message
	oneRel [1]func(*message.Message, store.PutResult)
	// reported is the message Finish lends each release.
	reported message.Message
}

// oneItem is relItem of every single message's Dedup (never written).
var oneItem = [1]int{0}

// Duplicate reports whether nothing is left to store: a single message
// already stored, or a batch of duplicates only. Result holds the
// originals.
func (d *Dedup) Duplicate() bool { return len(d.Store) == 0 }

// CheckDuplicate checks a single message m, whose UNIQ_KEY is uniq, with
// the installed Deduplicator; it returns nil when the message is not
// de-duplicated (no Deduplicator, or clientKey false: the key is the
// broker's). Call it before Route, so that prepared and delayed messages
// are checked too.
func (b *Broker) CheckDuplicate(ctx context.Context, m *message.Message, uniq string, clientKey bool) (*Dedup, error) {
	d := b.Deduplicator()
	if d == nil || !clientKey {
		return nil, nil
	}
	if err := b.dedupTailHidden(); err != nil {
		return nil, err
	}
	orig, release, err := d.Check(ctx, m.Topic, uniq)
	if err != nil {
		return nil, Errorf(ErrInternal, "duplicate check failed: %v", err)
	}
	dd := &Dedup{}
	if orig != nil {
		dd.one[0] = orig
		dd.Result = dd.one[:]
		return dd, nil
	}
	dd.one[0], dd.oneRel[0] = m, release
	dd.Result, dd.Store, dd.releases, dd.relItem = dd.one[:], dd.one[:], dd.oneRel[:], oneItem[:]
	return dd, nil
}

// CheckBatchDuplicates checks the items ms of a batch to topic with the
// installed Deduplicator; it returns nil when the batch is not
// de-duplicated (no Deduplicator, or an item without a UNIQ_KEY).
func (b *Broker) CheckBatchDuplicates(ctx context.Context, topic string, ms []*message.Message) (*Dedup, error) {
	d := b.Deduplicator()
	if d == nil {
		return nil, nil
	}
	first := map[string]int{}
	keys := make([]string, len(ms))
	for i, m := range ms {
		k, _ := message.Property(m.Properties, message.PropUniqKey)
		if k == "" {
			return nil, nil
		}
		keys[i] = k
		if _, ok := first[k]; !ok {
			first[k] = i
		}
	}
	uniq := make([]string, 0, len(first))
	for k := range first {
		uniq = append(uniq, k)
	}
	sort.Strings(uniq)
	if err := b.dedupTailHidden(); err != nil {
		return nil, err
	}
	bd := &Dedup{Result: make([]*message.Message, len(ms))}
	for _, k := range uniq {
		orig, release, err := d.Check(ctx, topic, k)
		if err != nil {
			bd.Abort()
			return nil, Errorf(ErrInternal, "duplicate check failed: %v", err)
		}
		i := first[k]
		if orig != nil {
			bd.Result[i] = orig
			continue
		}
		bd.releases = append(bd.releases, release)
		bd.relItem = append(bd.relItem, i)
		bd.Result[i] = ms[i]
	}
	for i, m := range ms { // in batch order
		if f := first[keys[i]]; f == i && bd.Result[i] == m {
			bd.Store = append(bd.Store, m)
		}
		bd.Result[i] = bd.Result[first[keys[i]]]
	}
	return bd, nil
}

// Finish releases every key checked with the put's result and the message
// as reported: a copy of the stored item without its body (the body is
// the request's), on queue queueID (the response's queueId), with the
// offsets the put (or the engine that took it) set. A second call, or one
// after Abort, does nothing.
func (d *Dedup) Finish(res store.PutResult, queueID int32) {
	for j, release := range d.releases {
		// Lent to release, which keeps nothing of it (Deduplicator): one
		// copy for all, not one allocation per key.
		d.reported = *d.Result[d.relItem[j]]
		d.reported.QueueID, d.reported.Body = queueID, nil
		release(&d.reported, res)
	}
	d.reported = message.Message{}
	d.releases = nil
}

// Abort releases every key checked as not stored: the send failed before
// its messages were handed over. After Finish it does nothing.
func (d *Dedup) Abort() {
	for _, release := range d.releases {
		release(nil, store.PutResult{Status: store.PutUnknownError})
	}
	d.releases = nil
}

// dedupTailHidden refuses, as busy (the client retries), a de-duplicated
// send while the store hides part of the log it recovered: a restarted
// synchronous master shows again only what it had shown, and the rest
// once the replicas confirm it (docs/replication.md). The key index holds
// only what is shown, so a retry of a send whose first copy is in that
// tail would not be found and would be stored twice.
func (b *Broker) dedupTailHidden() error {
	if v, end := b.st.VisibleOffset(), b.st.RecoveredEnd(); v < end {
		return Errorf(ErrBusy, "the log recovered at start is not all replicated yet (visible %d of %d): retry", v, end)
	}
	return nil
}
