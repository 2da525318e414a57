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

// ReadBrokers returns one broker to read from per broker group: its
// master, or, when the group has no master registered (it is down, or
// cannot reach the NameServers) or its registered master cannot be
// dialled, its registered slave with the lowest id, which serves what the
// master confirmed to it. Each such choice is told once per group to
// Config.OnSlaveRead and listed by SlaveReads until the master is back.
// No broker registered is an error.
func (c *Client) ReadBrokers(ctx context.Context) ([]Broker, error) {
	all, err := c.Brokers(ctx)
	if err != nil {
		return nil, err
	}
	var out []Broker
	var slaves []SlaveRead
	for i := 0; i < len(all); { // sorted by name and id: a group's master first
		j := i + 1
		for j < len(all) && all[j].Name == all[i].Name {
			j++
		}
		group := all[i:j]
		i = j
		b := group[0]
		switch {
		case b.ID != 0:
			slaves = append(slaves, SlaveRead{Slave: b, Why: "has no master registered with the NameServers"})
		case len(group) > 1:
			if _, err := c.conn(ctx, b.Addr); err != nil {
				b = group[1]
				slaves = append(slaves, SlaveRead{Slave: b, Why: fmt.Sprintf("has a master registered at %s that does not answer (%v)", group[0].Addr, err)})
			}
		}
		out = append(out, b)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("admin: no broker is registered with the NameServer %v", c.cfg.NamesrvAddrs)
	}
	c.noteSlaveReads(slaves)
	return out, nil
}

// SlaveRead is a broker group read from its slave: the slave and why
// (what is wrong with the group's master).
type SlaveRead struct {
	Slave Broker `json:"slave"`
	Why   string `json:"why"`
}

// String is the line the tools show for it.
func (r SlaveRead) String() string {
	return fmt.Sprintf("broker group %s %s: reading from its slave %d at %s (what the master confirmed to it)", r.Slave.Name, r.Why, r.Slave.ID, r.Slave.Addr)
}

// noteSlaveReads records the slaves read from instead of their group's
// master and tells Config.OnSlaveRead of a group it did not tell yet.
func (c *Client) noteSlaveReads(rs []SlaveRead) {
	var tell []SlaveRead
	c.mu.Lock()
	now := map[string]SlaveRead{}
	for _, r := range rs {
		now[r.Slave.Name] = r
		if old, ok := c.slaveReads[r.Slave.Name]; !ok || old.Slave != r.Slave {
			tell = append(tell, r)
		}
	}
	c.slaveReads = now
	c.mu.Unlock()
	if c.cfg.OnSlaveRead != nil {
		for _, r := range tell {
			c.cfg.OnSlaveRead(r)
		}
	}
}

// SlaveReads returns the broker groups the last ReadBrokers read from a
// slave, by group name.
func (c *Client) SlaveReads() []SlaveRead {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]SlaveRead, 0, len(c.slaveReads))
	for _, r := range c.slaveReads {
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Slave.Name < out[j].Slave.Name })
	return out
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
