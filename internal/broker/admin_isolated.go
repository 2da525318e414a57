package broker

// LIST_ISOLATED_RECORDS (Keel's request code 10402, no ext fields) answers
// the store's integrity report: the records withheld from consumers
// because they failed verification (store.Store.Isolated, oldest first),
// the count of read faults (bad bytes a re-read corrected) and the
// background scrubber's progress and latest findings, as JSON:
//
//	{"broker":"broker-a","records":[{"topic":"T","queueId":0,"queueOffset":5,
//	  "commitLogOffset":25515,"size":5103,"foundAt":"2026-...Z","foundBy":"read",
//	  "reason":"commitlog: entry at 25515: crc ..."}],
//	 "readFaults":0,
//	 "scrub":{"bytesPerSecond":4194304,"bytes":0,"passes":0,"problems":0,
//	  "recent":[{"file":"...","offset":25515,"msg":"..."}]}}
//
// It is read-only; the store's registry is its source, so the answer
// survives restarts.

import (
	"context"
	"encoding/json"

	"github.com/keelmq/keel/internal/core"
	"github.com/keelmq/keel/internal/remoting"
)

type isolatedReport struct {
	Broker     string                `json:"broker"`
	Records    []core.IsolatedRecord `json:"records"`
	ReadFaults int64                 `json:"readFaults"`
	Scrub      scrubReport           `json:"scrub"`
}

type scrubReport struct {
	BytesPerSecond int64           `json:"bytesPerSecond"`
	Bytes          int64           `json:"bytes"`
	Passes         int64           `json:"passes"`
	Problems       int64           `json:"problems"`
	Recent         []problemReport `json:"recent"`
}

type problemReport struct {
	File   string `json:"file"`
	Offset int64  `json:"offset"`
	Msg    string `json:"msg"`
}

func (b *Broker) handleListIsolated(ctx context.Context, c *remoting.Conn, req *remoting.Command) (*remoting.Command, error) {
	st := b.core.IntegrityStats()
	rep := isolatedReport{Broker: b.cfg.BrokerName, Records: b.core.Isolated(), ReadFaults: st.ReadFaults,
		Scrub: scrubReport{BytesPerSecond: st.Scrub.BytesPerSecond, Bytes: st.Scrub.Bytes, Passes: st.Scrub.Passes,
			Problems: st.Scrub.Problems, Recent: []problemReport{}}}
	if rep.Records == nil {
		rep.Records = []core.IsolatedRecord{}
	}
	for _, p := range st.Scrub.Recent {
		rep.Scrub.Recent = append(rep.Scrub.Recent, problemReport{File: p.File, Offset: p.Offset, Msg: p.Msg})
	}
	body, err := json.Marshal(rep)
	if err != nil {
		return nil, err
	}
	resp := req.NewResponse(remoting.ResSuccess, "")
	resp.Body = body
	return resp, nil
}
