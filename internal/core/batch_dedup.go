package broker

// De-duplication of batches, message by message (SEND_BATCH_MESSAGE whose
// items all carry a client UNIQ_KEY, as the Java client's do; the Go
// client's batch items carry none, so its batches are never checked).
//
// Each distinct key is checked once, in sorted order (two batches sharing
// keys cannot wait for each other in a cycle); a key repeated inside the
// batch is stored once. Items already stored within the window are not
// stored again; the others are stored with one append; the response lists
// every item's offset message ID in order, the original ones for
// duplicates, and the queueId / queueOffset of the first item.

import (
	"context"
	"sort"

	"github.com/keelmq/keel/internal/core"
	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/store"
)

type batchDedup struct {
	result   []*message.Message // per item: what the response reports (nil until known)
	store    []*message.Message // items to store
	releases []func(*message.Message, store.PutResult)
	relItem  []int // item whose stored message each release records
}

// checkBatch returns nil when the batch is not de-duplicated.
func (b *Broker) checkBatch(ctx context.Context, d Deduplicator, topic string, ms []*message.Message) (*batchDedup, error) {
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
	bd := &batchDedup{result: make([]*message.Message, len(ms))}
	for _, k := range uniq {
		orig, release, err := d.Check(ctx, topic, k)
		if err != nil {
			bd.finish(store.PutResult{Status: store.PutUnknownError, Err: err}, 0)
			return nil, core.Errorf(core.ErrInternal, "duplicate check failed: %v", err)
		}
		i := first[k]
		if orig != nil {
			bd.result[i] = orig
			continue
		}
		bd.releases = append(bd.releases, release)
		bd.relItem = append(bd.relItem, i)
		bd.result[i] = ms[i]
	}
	for i, m := range ms { // in batch order
		if f := first[keys[i]]; f == i && bd.result[i] == m {
			bd.store = append(bd.store, m)
		}
		bd.result[i] = bd.result[first[keys[i]]]
	}
	return bd, nil
}

// finish releases every key checked, recording the stored items on success.
func (bd *batchDedup) finish(res store.PutResult, queueID int32) {
	for j, release := range bd.releases {
		var stored *message.Message
		if res.Status == store.PutOK || res.Status == store.PutFlushDiskTimeout {
			reported := *bd.result[bd.relItem[j]]
			reported.QueueID, reported.Body = queueID, nil // the body is the request's
			stored = &reported
		}
		release(stored, res)
	}
	bd.releases = nil
}
