package bench

// The lean client: just enough of the RocketMQ protocol to drive a broker
// hard. Route lookup and topic creation go through the NameServer and the
// brokers it lists; sends and pulls are remoting requests on connections
// the producers and consumers own. It is not the official client: no
// retries, no rebalancing, no offset commits -- offsets are tracked here.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/keelmq/keel/internal/remoting"
)

// MessageQueue is one queue of a topic on a broker.
type MessageQueue struct {
	Topic      string
	BrokerAddr string
	QueueID    int32
}

func (q MessageQueue) String() string {
	return fmt.Sprintf("%s@%s:%d", q.Topic, q.BrokerAddr, q.QueueID)
}

// Permission bits of a queue in a route.
const (
	permWrite = 2
	permRead  = 4
)

// routeData is the part of GET_ROUTEINFO_BY_TOPIC's body we use.
type routeData struct {
	QueueDatas []struct {
		BrokerName     string `json:"brokerName"`
		ReadQueueNums  int    `json:"readQueueNums"`
		WriteQueueNums int    `json:"writeQueueNums"`
		Perm           int    `json:"perm"`
	} `json:"queueDatas"`
	BrokerDatas []brokerData `json:"brokerDatas"`
}

type brokerData struct {
	BrokerName  string            `json:"brokerName"`
	BrokerAddrs map[string]string `json:"brokerAddrs"`
}

// invoke sends a request and fails on a transport error or a response code
// other than 0.
func invoke(ctx context.Context, cl *remoting.Client, code int16, ext map[string]string, body []byte) (*remoting.Command, error) {
	resp, err := cl.Invoke(ctx, remoting.NewRequest(code, ext, body))
	if err != nil {
		return nil, err
	}
	if resp.Code != remoting.ResSuccess {
		return resp, &ResponseError{Code: resp.Code, Remark: resp.Remark}
	}
	return resp, nil
}

// ResponseError is a response with a non-zero code.
type ResponseError struct {
	Code   int16
	Remark string
}

func (e *ResponseError) Error() string {
	return fmt.Sprintf("bench: response code %d: %s", e.Code, e.Remark)
}

// LookupRoute returns the readable and writable queues of topic on master
// brokers, ordered by broker address then queue id.
func LookupRoute(ctx context.Context, ns *remoting.Client, topic string) (read, write []MessageQueue, err error) {
	resp, err := invoke(ctx, ns, remoting.ReqGetRouteInfoByTopic, map[string]string{"topic": topic}, nil)
	if err != nil {
		return nil, nil, fmt.Errorf("bench: route of %s: %w", topic, err)
	}
	var rd routeData
	if err := json.Unmarshal(resp.Body, &rd); err != nil {
		return nil, nil, fmt.Errorf("bench: route of %s: %w", topic, err)
	}
	masters := make(map[string]string)
	for _, b := range rd.BrokerDatas {
		if a := b.BrokerAddrs["0"]; a != "" {
			masters[b.BrokerName] = a
		}
	}
	for _, q := range rd.QueueDatas {
		addr, ok := masters[q.BrokerName]
		if !ok {
			continue
		}
		if q.Perm&permRead != 0 {
			read = appendQueues(read, topic, addr, q.ReadQueueNums)
		}
		if q.Perm&permWrite != 0 {
			write = appendQueues(write, topic, addr, q.WriteQueueNums)
		}
	}
	sortQueues(read)
	sortQueues(write)
	return read, write, nil
}

func appendQueues(qs []MessageQueue, topic, addr string, n int) []MessageQueue {
	for i := range n {
		qs = append(qs, MessageQueue{Topic: topic, BrokerAddr: addr, QueueID: int32(i)})
	}
	return qs
}

func sortQueues(qs []MessageQueue) {
	slices.SortFunc(qs, func(a, b MessageQueue) int {
		if a.BrokerAddr != b.BrokerAddr {
			if a.BrokerAddr < b.BrokerAddr {
				return -1
			}
			return 1
		}
		return int(a.QueueID - b.QueueID)
	})
}

// MasterBrokers returns the addresses of the master brokers the NameServer
// knows (GET_BROKER_CLUSTER_INFO).
func MasterBrokers(ctx context.Context, ns *remoting.Client) ([]string, error) {
	resp, err := invoke(ctx, ns, remoting.ReqGetBrokerClusterInfo, nil, nil)
	if err != nil {
		return nil, fmt.Errorf("bench: cluster info: %w", err)
	}
	var ci struct {
		BrokerAddrTable map[string]brokerData `json:"brokerAddrTable"`
	}
	if err := json.Unmarshal(resp.Body, &ci); err != nil {
		return nil, fmt.Errorf("bench: cluster info: %w", err)
	}
	var addrs []string
	for _, b := range ci.BrokerAddrTable {
		if a := b.BrokerAddrs["0"]; a != "" {
			addrs = append(addrs, a)
		}
	}
	slices.Sort(addrs)
	if len(addrs) == 0 {
		return nil, errors.New("bench: the NameServer knows no master broker")
	}
	return addrs, nil
}

// CreateTopic creates or updates topic with queues read and write queues
// on the broker cl is connected to.
func CreateTopic(ctx context.Context, cl *remoting.Client, topic string, queues int) error {
	n := strconv.Itoa(queues)
	_, err := invoke(ctx, cl, remoting.ReqUpdateAndCreateTopic, map[string]string{
		"topic": topic, "readQueueNums": n, "writeQueueNums": n, "perm": "6", "topicFilterType": "SINGLE_TAG"}, nil)
	if err != nil {
		return fmt.Errorf("bench: create topic %s: %w", topic, err)
	}
	return nil
}

// WaitRoute polls the NameServer until topic has at least queues readable
// and writable queues on every master, or ctx ends.
func WaitRoute(ctx context.Context, ns *remoting.Client, topic string, queues int) (read, write []MessageQueue, err error) {
	for {
		read, write, err = LookupRoute(ctx, ns, topic)
		if err == nil && len(read) >= queues && len(write) >= queues {
			return read, write, nil
		}
		select {
		case <-ctx.Done():
			if err == nil {
				err = fmt.Errorf("bench: route of %s has %d/%d queues, want %d", topic, len(read), len(write), queues)
			}
			return nil, nil, fmt.Errorf("%w (%v)", err, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// queueOffset asks the broker for the min (GET_MIN_OFFSET) or max
// (GET_MAX_OFFSET) offset of q.
func queueOffset(ctx context.Context, cl *remoting.Client, q MessageQueue, code int16) (int64, error) {
	resp, err := invoke(ctx, cl, code, map[string]string{"topic": q.Topic, "queueId": strconv.Itoa(int(q.QueueID))}, nil)
	if err != nil {
		return 0, fmt.Errorf("bench: offset of %s: %w", q, err)
	}
	return resp.ExtInt64("offset")
}
