package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"

	"github.com/keelmq/keel/internal/acl"
	"github.com/keelmq/keel/internal/broker"
	"github.com/keelmq/keel/internal/core"
	"github.com/keelmq/keel/internal/kafka"
	"github.com/keelmq/keel/internal/remoting"
)

// kafkaPeers is the Kafka door's way to the other broker groups' masters
// (kafka.Peers): Keel's KEEL_KAFKA_GROUP_OFFSETS and KEEL_KAFKA_TOPIC requests
// (and DELETE_TOPIC_IN_BROKER) over one remoting
// connection per master, dialed when first needed and again after it
// closed: over TLS when tls is set (parts.peerTLS: tlsEnable, or
// tlsMode=enforcing), else plain TCP. A failed handshake fails the request
// it was dialled for, as a master that does not answer does.
// With access control on, a request made for an authenticated client
// (kafka.PeerUser) is signed as that client's account, so the other
// master checks the client's own permissions; one for no account goes
// unsigned (it passes only from a globalWhiteRemoteAddresses address).
type kafkaPeers struct {
	mu      sync.Mutex
	clients map[string]*remoting.Client
	tls     *tls.Config // nil: plain TCP
	// secret returns an account's secret key (nil: access control off).
	secret func(user string) (string, bool)
}

func newKafkaPeers(tc *tls.Config) *kafkaPeers {
	return &kafkaPeers{clients: map[string]*remoting.Client{}, tls: tc}
}

func (k *kafkaPeers) client(ctx context.Context, addr string) (*remoting.Client, error) {
	k.mu.Lock()
	c := k.clients[addr]
	k.mu.Unlock()
	if c != nil {
		select {
		case <-c.Done():
		default:
			return c, nil
		}
	}
	c, err := remoting.Dial(ctx, addr, remoting.ClientConfig{TLS: k.tls})
	if err != nil {
		return nil, err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if old := k.clients[addr]; old != nil {
		select {
		case <-old.Done():
		default:
			c.Close()
			return old, nil
		}
	}
	k.clients[addr] = c
	return c, nil
}

// sign signs req as the account of the client it is made for, if any.
func (k *kafkaPeers) sign(ctx context.Context, req *remoting.Command) *remoting.Command {
	if k.secret == nil {
		return req
	}
	if user := kafka.PeerUser(ctx); user != "" {
		if sk, ok := k.secret(user); ok {
			acl.SignRequest(req, user, sk)
		}
	}
	return req
}

// close closes every connection (the door stopped).
func (k *kafkaPeers) close() {
	k.mu.Lock()
	defer k.mu.Unlock()
	for addr, c := range k.clients {
		c.Close()
		delete(k.clients, addr)
	}
}

func (k *kafkaPeers) invoke(ctx context.Context, addr, group, topic, op string, body *broker.KafkaOffsets) (*broker.KafkaOffsets, error) {
	c, err := k.client(ctx, addr)
	if err != nil {
		return nil, err
	}
	var data []byte
	if body != nil {
		if data, err = json.Marshal(body); err != nil {
			return nil, err
		}
	}
	resp, err := c.Invoke(ctx, k.sign(ctx, remoting.NewRequest(remoting.ReqKafkaGroupOffsets,
		map[string]string{"consumerGroup": group, "topic": topic, "op": op}, data)))
	if err != nil {
		return nil, err
	}
	switch resp.Code {
	case remoting.ResSuccess:
	case remoting.ResTopicNotExist:
		return nil, core.Errorf(core.ErrTopicNotFound, "%s: %s", addr, resp.Remark)
	default:
		return nil, fmt.Errorf("%s answered %s (%d): %s", addr, remoting.ResponseCode(resp.Code), resp.Code, resp.Remark)
	}
	var out broker.KafkaOffsets
	if len(resp.Body) > 0 {
		if err := json.Unmarshal(resp.Body, &out); err != nil {
			return nil, fmt.Errorf("%s: answer: %w", addr, err)
		}
	}
	return &out, nil
}

func (k *kafkaPeers) CommitOffsets(ctx context.Context, addr, group, topic string, offsets map[int32]int64) error {
	body := &broker.KafkaOffsets{Offsets: make(map[string]int64, len(offsets))}
	for q, off := range offsets {
		body.Offsets[strconv.Itoa(int(q))] = off
	}
	_, err := k.invoke(ctx, addr, group, topic, "commit", body)
	return err
}

func (k *kafkaPeers) FetchOffsets(ctx context.Context, addr, group, topic string) (map[string]map[int32]int64, error) {
	r, err := k.invoke(ctx, addr, group, topic, "fetch", nil)
	if err != nil {
		return nil, err
	}
	out := make(map[string]map[int32]int64, len(r.Topics))
	for t, qs := range r.Topics {
		m := make(map[int32]int64, len(qs))
		for qk, off := range qs {
			q, err := strconv.ParseInt(qk, 10, 32)
			if err != nil {
				return nil, fmt.Errorf("%s: answer: queue %q", addr, qk)
			}
			m[int32(q)] = off
		}
		out[t] = m
	}
	return out, nil
}

func (k *kafkaPeers) DeleteOffsets(ctx context.Context, addr, group, topic string, queues []int32) error {
	_, err := k.invoke(ctx, addr, group, topic, "delete", &broker.KafkaOffsets{Queues: queues})
	return err
}

// topic sends KEEL_KAFKA_TOPIC.
func (k *kafkaPeers) topic(ctx context.Context, addr, topic, op string, queues int32, attrs map[string]string) error {
	c, err := k.client(ctx, addr)
	if err != nil {
		return err
	}
	var data []byte
	if len(attrs) > 0 {
		if data, err = json.Marshal(broker.KafkaTopic{Attributes: attrs}); err != nil {
			return err
		}
	}
	resp, err := c.Invoke(ctx, k.sign(ctx, remoting.NewRequest(remoting.ReqKafkaTopic,
		map[string]string{"topic": topic, "op": op, "queues": strconv.Itoa(int(queues))}, data)))
	if err != nil {
		return err
	}
	switch resp.Code {
	case remoting.ResSuccess:
		return nil
	case remoting.ResKeelTopicExists:
		return fmt.Errorf("%s: %s: %w", addr, resp.Remark, kafka.ErrTopicExists)
	case remoting.ResTopicNotExist:
		return core.Errorf(core.ErrTopicNotFound, "%s: %s", addr, resp.Remark)
	case remoting.ResNoPermission: // the client's account may not do it there
		return core.Errorf(core.ErrForbidden, "%s answered NO_PERMISSION: %s", addr, resp.Remark)
	}
	return fmt.Errorf("%s answered %s (%d): %s", addr, remoting.ResponseCode(resp.Code), resp.Code, resp.Remark)
}

func (k *kafkaPeers) CreateTopic(ctx context.Context, addr, topic string, queues int32, attrs map[string]string) error {
	return k.topic(ctx, addr, topic, "create", queues, attrs)
}

func (k *kafkaPeers) GrowTopic(ctx context.Context, addr, topic string, queues int32) error {
	return k.topic(ctx, addr, topic, "grow", queues, nil)
}

func (k *kafkaPeers) DeleteTopic(ctx context.Context, addr, topic string) error {
	c, err := k.client(ctx, addr)
	if err != nil {
		return err
	}
	resp, err := c.Invoke(ctx, k.sign(ctx, remoting.NewRequest(remoting.ReqDeleteTopicInBroker, map[string]string{"topic": topic}, nil)))
	if err != nil {
		return err
	}
	if resp.Code != remoting.ResSuccess {
		return fmt.Errorf("%s answered %s (%d): %s", addr, remoting.ResponseCode(resp.Code), resp.Code, resp.Remark)
	}
	return nil
}
