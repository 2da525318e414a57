package core

// De-duplication of batches, message by message (a batch whose items all
// carry a client UNIQ_KEY, as the Java client's RocketMQ batches do; the Go
// client's batch items carry none, so its batches are never checked).
//
// Each distinct key is checked once, in sorted order (two batches sharing
// keys cannot wait for each other in a cycle); a key repeated inside the
// batch is stored once. Items already stored within the window are not
// stored again; the others are stored with one append; the response lists
// every item's offset message ID in order, the original ones for
// duplicates, and the queueId / queueOffset of the first item (the front
// door's send response).

import (
	"context"
	"sort"

	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/store"
)

// BatchDedup is a batch checked key by key.
type BatchDedup struct {
	Result   []*message.Message // per item: what the response reports (nil until known)
	Store    []*message.Message // items to store
	releases []func(*message.Message, store.PutResult)
	relItem  []int // item whose stored message each release records
}

// CheckBatchDuplicates checks the items ms of a batch to topic with the
// installed Deduplicator; it returns nil when the batch is not
// de-duplicated (no Deduplicator, or an item without a UNIQ_KEY). The
// caller stores bd.Store and then calls bd.Finish exactly once.
func (b *Broker) CheckBatchDuplicates(ctx context.Context, topic string, ms []*message.Message) (*BatchDedup, error) {
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
	bd := &BatchDedup{Result: make([]*message.Message, len(ms))}
	for _, k := range uniq {
		orig, release, err := d.Check(ctx, topic, k)
		if err != nil {
			bd.Finish(store.PutResult{Status: store.PutUnknownError, Err: err}, 0)
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

// Finish releases every key checked, recording the stored items on
// success (queueID: the queue they went to).
func (bd *BatchDedup) Finish(res store.PutResult, queueID int32) {
	for j, release := range bd.releases {
		var stored *message.Message
		if res.Status == store.PutOK || res.Status == store.PutFlushDiskTimeout {
			reported := *bd.Result[bd.relItem[j]]
			reported.QueueID, reported.Body = queueID, nil // the body is the request's
			stored = &reported
		}
		release(stored, res)
	}
	bd.releases = nil
}
