package admin

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/remoting"
)

// SendSpec is a message to send.
type SendSpec struct {
	Topic      string
	Tags       string
	Keys       []string
	Body       []byte
	Properties map[string]string // extra user properties
	QueueID    int32             // -1: any writable queue
	Broker     string            // "": any master hosting the topic
}

// SendResult reports where a message was stored.
type SendResult struct {
	Status      string `json:"status"`
	MsgID       string `json:"msgId"`
	OffsetMsgID string `json:"offsetMsgId"`
	Topic       string `json:"topic"`
	Broker      string `json:"broker"`
	QueueID     int32  `json:"queueId"`
	QueueOffset int64  `json:"queueOffset"`
}

// rawSend is one SEND_MESSAGE request.
type rawSend struct {
	topic          string
	queueID        int32
	flag, sysFlag  int32
	reconsumeTimes int32
	bornMs         int64
	props          string
	body           []byte
}

// Send sends one message (SEND_MESSAGE, as a producer of
// ToolsProducerGroup) and waits for the broker's answer. A topic that does
// not exist is created by the brokers that create topics on first send
// (autoCreateTopicEnable), as for any client. A FLUSH_DISK_TIMEOUT answer returns the result and an error: the
// message is stored but its durability was not confirmed.
func (c *Client) Send(ctx context.Context, s SendSpec) (SendResult, error) {
	t, err := c.sendTopic(ctx, s.Topic)
	if err != nil {
		return SendResult{}, err
	}
	b, qid, err := pickWriteQueue(t, s.Broker, s.QueueID)
	if err != nil {
		return SendResult{}, err
	}
	props := make(map[string]string, len(s.Properties)+4)
	for k, v := range s.Properties {
		props[k] = v
	}
	if s.Tags != "" {
		props[message.PropTags] = s.Tags
	}
	if len(s.Keys) > 0 {
		props[message.PropKeys] = strings.Join(s.Keys, " ")
	}
	props[message.PropWaitStoreMsgOK] = "true"
	uniq, err := c.uniqID(ctx, b.Addr)
	if err != nil {
		return SendResult{}, err
	}
	props[message.PropUniqKey] = uniq
	r := rawSend{topic: s.Topic, queueID: qid, bornMs: time.Now().UnixMilli(),
		props: message.EncodeProperties(props), body: s.Body}
	res, err := c.sendRaw(ctx, b, r)
	res.MsgID = uniq
	return res, err
}

// defaultTopic is the template a broker creates topics from on first send
// (RocketMQ's TBW102); a broker has it, with the inherit permission, only
// with autoCreateTopicEnable=true.
const defaultTopic = "TBW102"

// sendTopic is the topic a send goes to: the topic itself, or for one that
// does not exist yet, the brokers that would create it on first send (those
// holding defaultTopic with the inherit permission), as clients do.
func (c *Client) sendTopic(ctx context.Context, name string) (Topic, error) {
	t, err := c.topic(ctx, name, true)
	if !errors.Is(err, ErrNotFound) {
		return t, err
	}
	tpl, terr := c.topic(ctx, defaultTopic, true)
	if terr != nil && !errors.Is(terr, ErrNotFound) {
		return Topic{}, terr
	}
	t = Topic{Name: name, Kind: TopicKind(name), Messages: -1, Written: -1}
	for _, b := range tpl.Brokers {
		if b.Perm&PermInherit != 0 {
			b.Topic = name
			b.Perm &^= PermInherit
			t.Brokers = append(t.Brokers, b)
		}
	}
	if len(t.Brokers) == 0 {
		return Topic{}, fmt.Errorf("%w (no broker creates topics on first send: autoCreateTopicEnable=false; create it with keel topic create)", err)
	}
	return t, nil
}

func pickWriteQueue(t Topic, broker string, queueID int32) (TopicOnBroker, int32, error) {
	var cands []TopicOnBroker
	for _, b := range t.Brokers {
		if (broker == "" || b.Broker == broker) && b.Perm&PermWrite != 0 && b.WriteQueues > 0 {
			cands = append(cands, b)
		}
	}
	if len(cands) == 0 {
		return TopicOnBroker{}, 0, fmt.Errorf("admin: topic %q has no writable queue%s", t.Name, onBroker(broker))
	}
	b := cands[rand.IntN(len(cands))]
	if queueID < 0 {
		return b, rand.Int32N(b.WriteQueues), nil
	}
	if queueID >= b.WriteQueues {
		return TopicOnBroker{}, 0, fmt.Errorf("admin: topic %q has %d write queues on %s; queue %d does not exist",
			t.Name, b.WriteQueues, b.Broker, queueID)
	}
	return b, queueID, nil
}

func onBroker(b string) string {
	if b == "" {
		return ""
	}
	return " on broker " + b
}

// uniqID makes a unique key with the local address of the connection to
// addr, as clients do.
func (c *Client) uniqID(ctx context.Context, addr string) (string, error) {
	cl, err := c.conn(ctx, addr)
	if err != nil {
		return "", err
	}
	ip := netip.IPv4Unspecified()
	if a, ok := cl.Conn().LocalAddr().(*net.TCPAddr); ok {
		ip = a.AddrPort().Addr().Unmap()
	}
	return message.NewUniqIDGenerator(ip).Next(), nil
}

func (c *Client) sendRaw(ctx context.Context, b TopicOnBroker, r rawSend) (SendResult, error) {
	ext := map[string]string{
		"producerGroup": ToolsProducerGroup, "topic": r.topic, "defaultTopic": "TBW102", "defaultTopicQueueNums": "4",
		"queueId": strconv.Itoa(int(r.queueID)), "sysFlag": strconv.Itoa(int(r.sysFlag)),
		"bornTimestamp": strconv.FormatInt(r.bornMs, 10), "flag": strconv.Itoa(int(r.flag)),
		"properties": r.props, "reconsumeTimes": strconv.Itoa(int(r.reconsumeTimes)),
		"unitMode": "false", "batch": "false",
	}
	resp, err := c.call(ctx, b.Addr, remoting.NewRequest(remoting.ReqSendMessage, ext, r.body))
	if err != nil {
		return SendResult{}, err
	}
	res := SendResult{Status: remoting.ResponseCode(resp.Code).String(), Topic: r.topic, Broker: b.Broker}
	if resp.Code != remoting.ResSuccess && resp.Code != remoting.ResFlushDiskTimeout {
		return res, &Error{Addr: b.Addr, Request: remoting.ReqSendMessage, Code: resp.Code, Remark: resp.Remark}
	}
	res.Status = "SEND_OK"
	res.OffsetMsgID = resp.ExtFields["msgId"]
	res.QueueID = int32(atoi(resp.ExtFields["queueId"]))
	res.QueueOffset = atoi(resp.ExtFields["queueOffset"])
	if resp.Code == remoting.ResFlushDiskTimeout {
		res.Status = "FLUSH_DISK_TIMEOUT"
		return res, errors.New("admin: the broker stored the message but did not confirm the disk flush in time (FLUSH_DISK_TIMEOUT)")
	}
	return res, nil
}

func atoi(s string) int64 {
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}
