package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/keelmq/keel/internal/pendingtxn"
	"github.com/keelmq/keel/internal/remoting"
)

// PendingTransaction is one undecided half message, as the broker's
// transaction engine describes it (one definition: internal/pendingtxn).
type PendingTransaction = pendingtxn.Transaction

// BrokerTransactions is one master's undecided half messages.
type BrokerTransactions struct {
	Broker  string               `json:"broker"`
	Addr    string               `json:"addr"`
	Total   int                  `json:"total"` // before the limit
	Pending []PendingTransaction `json:"pending"`
	Err     string               `json:"error,omitempty"`
}

// PendingTransactions lists the undecided half messages of every master
// (a group without a master: its slave, ReadBrokers),
// filtered by real topic and producer group (empty: any), at most limit per
// broker (0: all). A broker that does not answer (for example one with
// transactions disabled) is reported in its Err field.
func (c *Client) PendingTransactions(ctx context.Context, topic, group string, limit int) ([]BrokerTransactions, error) {
	brokers, err := c.ReadBrokers(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]BrokerTransactions, 0, len(brokers))
	for _, b := range brokers {
		bt := BrokerTransactions{Broker: b.Name, Addr: b.Addr, Pending: []PendingTransaction{}}
		resp, err := c.invoke(ctx, b.Addr, remoting.ReqListTransactions, map[string]string{
			"topic": topic, "producerGroup": group, "limit": strconv.Itoa(limit)}, nil)
		if err == nil {
			err = json.Unmarshal(resp.Body, &bt)
			if err != nil {
				err = fmt.Errorf("admin: decode pending transactions of %s: %w", b.Name, err)
			}
		}
		if err != nil {
			bt.Err = err.Error()
		}
		if bt.Pending == nil {
			bt.Pending = []PendingTransaction{}
		}
		out = append(out, bt)
	}
	return out, nil
}
