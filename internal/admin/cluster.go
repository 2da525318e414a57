package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"

	"github.com/keelmq/keel/internal/remoting"
)

// Broker is one broker process registered with the NameServers.
type Broker struct {
	Cluster string `json:"cluster"`
	Name    string `json:"brokerName"`
	ID      int64  `json:"brokerId"` // 0 = master
	Addr    string `json:"addr"`
}

// BrokerRuntime is a broker's GET_BROKER_RUNTIME_INFO table plus where it
// came from; Err is set when the broker did not answer.
type BrokerRuntime struct {
	Broker
	Info map[string]string `json:"info,omitempty"`
	Err  string            `json:"error,omitempty"`
}

type wireBrokerData struct {
	Cluster     string          `json:"cluster"`
	BrokerName  string          `json:"brokerName"`
	BrokerAddrs json.RawMessage `json:"brokerAddrs"` // {"0":"addr"} or fastjson's {0:"addr"}
}

// brokerAddrs decodes a brokerAddrs map whose keys may be unquoted numbers.
func brokerAddrs(raw json.RawMessage) (map[int64]string, error) {
	out := make(map[int64]string)
	if len(raw) == 0 || string(raw) == "null" {
		return out, nil
	}
	err := objectEntries(raw, func(k, v []byte) error {
		ks := string(k)
		if len(k) > 0 && k[0] == '"' {
			if err := json.Unmarshal(k, &ks); err != nil {
				return err
			}
		}
		id, err := strconv.ParseInt(ks, 10, 64)
		if err != nil {
			return fmt.Errorf("broker id %q: %w", ks, err)
		}
		var addr string
		if err := json.Unmarshal(v, &addr); err != nil {
			return err
		}
		out[id] = addr
		return nil
	})
	return out, err
}

func (d wireBrokerData) brokers() ([]Broker, error) {
	addrs, err := brokerAddrs(d.BrokerAddrs)
	if err != nil {
		return nil, fmt.Errorf("admin: broker %s: %w", d.BrokerName, err)
	}
	var out []Broker
	for id, addr := range addrs {
		out = append(out, Broker{Cluster: d.Cluster, Name: d.BrokerName, ID: id, Addr: addr})
	}
	return out, nil
}

// Brokers lists every registered broker, sorted by name and id.
func (c *Client) Brokers(ctx context.Context) ([]Broker, error) {
	resp, err := c.invokeNamesrv(ctx, remoting.ReqGetBrokerClusterInfo, nil)
	if err != nil {
		return nil, err
	}
	var ci struct {
		BrokerAddrTable map[string]wireBrokerData `json:"brokerAddrTable"`
	}
	if err := json.Unmarshal(resp.Body, &ci); err != nil {
		return nil, fmt.Errorf("admin: decode cluster info: %w", err)
	}
	var out []Broker
	for _, d := range ci.BrokerAddrTable {
		bs, err := d.brokers()
		if err != nil {
			return nil, err
		}
		out = append(out, bs...)
	}
	sortBrokers(out)
	return out, nil
}

func sortBrokers(bs []Broker) {
	sort.Slice(bs, func(i, j int) bool {
		if bs[i].Name != bs[j].Name {
			return bs[i].Name < bs[j].Name
		}
		return bs[i].ID < bs[j].ID
	})
}

// Masters lists the master brokers (id 0). No broker registered is an
// error: nothing can be administered.
func (c *Client) Masters(ctx context.Context) ([]Broker, error) {
	all, err := c.Brokers(ctx)
	if err != nil {
		return nil, err
	}
	var out []Broker
	for _, b := range all {
		if b.ID == 0 {
			out = append(out, b)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("admin: no master broker is registered with the NameServer %v", c.cfg.NamesrvAddrs)
	}
	return out, nil
}

// Runtime asks every registered broker for its runtime information. A
// broker that does not answer is reported in its Err field.
func (c *Client) Runtime(ctx context.Context) ([]BrokerRuntime, error) {
	bs, err := c.Brokers(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]BrokerRuntime, len(bs))
	for i, b := range bs {
		out[i].Broker = b
		resp, err := c.invoke(ctx, b.Addr, remoting.ReqGetBrokerRuntimeInfo, nil, nil)
		if err == nil {
			var body struct {
				Table map[string]string `json:"table"`
			}
			err = json.Unmarshal(resp.Body, &body)
			out[i].Info = body.Table
		}
		if err != nil {
			out[i].Err = err.Error()
		}
	}
	return out, nil
}
