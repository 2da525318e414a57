package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/keelmq/keel/internal/remoting"
)

// IsolatedRecord is a record withheld from consumers (never delivered;
// consumers continue after it). QueueID and QueueOffset are -1 when the
// scrubber found it and its damaged header did not tell its queue.
type IsolatedRecord struct {
	Topic           string    `json:"topic"`
	QueueID         int32     `json:"queueId"`
	QueueOffset     int64     `json:"queueOffset"`
	CommitLogOffset int64     `json:"commitLogOffset"`
	Size            int32     `json:"size"`
	FoundAt         time.Time `json:"foundAt"`
	FoundBy         string    `json:"foundBy"` // "read" or "scrub"
	Reason          string    `json:"reason"`
}

// ScrubProblem is a finding of the background scrubber, in keel check's
// terms.
type ScrubProblem struct {
	File   string `json:"file"`
	Offset int64  `json:"offset"`
	Msg    string `json:"msg"`
}

// ScrubStatus is a broker's background scrubber: its rate (0: off), what
// it read and found since the broker started, its latest findings.
type ScrubStatus struct {
	BytesPerSecond int64          `json:"bytesPerSecond"`
	Bytes          int64          `json:"bytes"`
	Passes         int64          `json:"passes"`
	Problems       int64          `json:"problems"`
	Recent         []ScrubProblem `json:"recent"`
}

// BrokerIntegrity is one broker's answer.
type BrokerIntegrity struct {
	Broker     string           `json:"broker"`
	Addr       string           `json:"addr"`
	Records    []IsolatedRecord `json:"records"`
	ReadFaults int64            `json:"readFaults"`
	Scrub      ScrubStatus      `json:"scrub"`
	Err        string           `json:"error,omitempty"`
}

// IsolatedRecords asks every registered broker (masters and slaves: each
// has its own store) for its isolated records. A broker that does not
// answer is reported in its Err field.
func (c *Client) IsolatedRecords(ctx context.Context) ([]BrokerIntegrity, error) {
	brokers, err := c.Brokers(ctx)
	if err != nil {
		return nil, err
	}
	if len(brokers) == 0 {
		return nil, fmt.Errorf("admin: no broker is registered with the NameServer %v", c.cfg.NamesrvAddrs)
	}
	out := make([]BrokerIntegrity, 0, len(brokers))
	for _, b := range brokers {
		bi := BrokerIntegrity{}
		resp, err := c.invoke(ctx, b.Addr, remoting.ReqListIsolatedRecords, nil, nil)
		if err == nil {
			if err = json.Unmarshal(resp.Body, &bi); err != nil {
				err = fmt.Errorf("admin: decode isolated records of %s: %w", b.Name, err)
			}
		}
		bi.Broker, bi.Addr = b.Name, b.Addr
		if b.ID != 0 {
			bi.Broker = fmt.Sprintf("%s/%d", b.Name, b.ID)
		}
		if err != nil {
			bi.Err = err.Error()
		}
		if bi.Records == nil {
			bi.Records = []IsolatedRecord{}
		}
		if bi.Scrub.Recent == nil {
			bi.Scrub.Recent = []ScrubProblem{}
		}
		out = append(out, bi)
	}
	return out, nil
}
