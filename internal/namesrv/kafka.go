package namesrv

// The Kafka view of a cluster. A broker running a Kafka door adds to its
// REGISTER_BROKER ext fields (which Java NameServers and RocketMQ clients
// never read):
//
//	kafkaAddr    host:port its Kafka door advertises (absent: a slave,
//	             whose door is closed, listed as a replica only)
//	kafkaNodeId  its Kafka node id (unique in the cluster)
//	kafkaEpoch   its replication epoch (the group's master epoch, as far
//	             as it knows; absent: unknown)
//	kafkaInSync  a master's in-sync replicas, as brokerIds (comma list;
//	             absent: not reported)
//	kafkaRack    its rack (kafkaBrokerRack; absent: none)
//
// The NameServer keeps them with the broker's live entry. A registration
// whose kafkaNodeId another live broker of the cluster, at another
// address, holds is taken without its Kafka fields, and the answer's ext
// kafkaRefused says why. GET_KAFKA_CLUSTER (Keel's request 10440, ext
// clusterName) answers the cluster's Kafka brokers and, for each topic,
// the broker groups hosting it (their master's queue data), as JSON
// (KafkaCluster); the Kafka door derives Metadata from it.

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/keelmq/keel/internal/remoting"
)

// KafkaRegistration is what a broker with a Kafka door adds to its
// registration.
type KafkaRegistration struct {
	Addr   string  // advertised host:port; empty: a replica without a door (a slave)
	NodeID int32   // unique in the cluster
	Epoch  int32   // the group's master epoch as the broker knows it; -1: unknown
	InSync []int64 // a master's in-sync replicas by brokerId (nil: not reported)
	Rack   string  // its rack ("": none)
}

// Ext returns the registration ext fields carrying k.
func (k KafkaRegistration) Ext() map[string]string {
	ext := map[string]string{"kafkaNodeId": strconv.Itoa(int(k.NodeID))}
	if k.Addr != "" {
		ext["kafkaAddr"] = k.Addr
	}
	if k.Rack != "" {
		ext["kafkaRack"] = k.Rack
	}
	if k.Epoch >= 0 {
		ext["kafkaEpoch"] = strconv.Itoa(int(k.Epoch))
	}
	if k.InSync != nil {
		ids := make([]string, len(k.InSync))
		for i, id := range k.InSync {
			ids[i] = strconv.FormatInt(id, 10)
		}
		ext["kafkaInSync"] = strings.Join(ids, ",")
	}
	return ext
}

// maxRack bounds a registration's kafkaRack.
const maxRack = 64

// maxInSync bounds the kafkaInSync list a registration may carry.
const maxInSync = 64

func decodeKafkaRegistration(req *remoting.Command) (*KafkaRegistration, error) {
	addr := req.Ext("kafkaAddr")
	if _, ok := req.ExtFields["kafkaNodeId"]; !ok && addr == "" {
		return nil, nil
	}
	id, err := req.ExtInt32("kafkaNodeId")
	if err != nil || id < 0 {
		return nil, fmt.Errorf("bad kafkaNodeId %q", req.Ext("kafkaNodeId"))
	}
	k := &KafkaRegistration{Addr: addr, NodeID: id, Epoch: -1, Rack: req.Ext("kafkaRack")}
	if len(k.Rack) > maxRack {
		return nil, fmt.Errorf("kafkaRack is longer than %d bytes", maxRack)
	}
	if req.Ext("kafkaEpoch") != "" {
		e, err := req.ExtInt32("kafkaEpoch")
		if err != nil || e < 0 {
			return nil, fmt.Errorf("bad kafkaEpoch %q", req.Ext("kafkaEpoch"))
		}
		k.Epoch = e
	}
	if list, ok := req.ExtFields["kafkaInSync"]; ok {
		k.InSync = []int64{}
		if list != "" {
			parts := strings.Split(list, ",")
			if len(parts) > maxInSync {
				return nil, fmt.Errorf("kafkaInSync lists %d brokers, more than %d", len(parts), maxInSync)
			}
			for _, p := range parts {
				v, err := strconv.ParseInt(p, 10, 64)
				if err != nil || v < 0 {
					return nil, fmt.Errorf("bad kafkaInSync %q", list)
				}
				k.InSync = append(k.InSync, v)
			}
		}
	}
	return k, nil
}

// KafkaCluster is the GET_KAFKA_CLUSTER body.
type KafkaCluster struct {
	Brokers []KafkaBroker `json:"brokers"` // by brokerName, then brokerId
	// Topics maps each topic to the groups hosting it, by brokerName.
	Topics map[string][]KafkaTopicGroup `json:"topics"`
}

// KafkaBroker is one live broker of the cluster that registered a Kafka
// node id; KafkaAddr is empty for a replica without a door (a slave).
type KafkaBroker struct {
	BrokerName string  `json:"brokerName"`
	BrokerID   int64   `json:"brokerId"`
	Addr       string  `json:"addr"` // the RocketMQ address
	KafkaAddr  string  `json:"kafkaAddr,omitempty"`
	NodeID     int32   `json:"nodeId"`
	Epoch      int32   `json:"epoch"`            // -1: unknown
	InSync     []int64 `json:"inSync,omitempty"` // as the broker reported it
	Rack       string  `json:"rack,omitempty"`
}

// KafkaTopicGroup is one group's queues of a topic.
type KafkaTopicGroup struct {
	BrokerName     string `json:"brokerName"`
	ReadQueueNums  int    `json:"readQueueNums"`
	WriteQueueNums int    `json:"writeQueueNums"`
	Perm           int    `json:"perm"`
}

// kafkaConflict names the live broker of r's cluster, at another address,
// that holds r's Kafka node id ("" if none).
func (t *table) kafkaConflict(r registration) string {
	if r.kafka == nil {
		return ""
	}
	for addr, lb := range t.live {
		if addr != r.addr && lb.cluster == r.cluster && lb.kafka != nil && lb.kafka.NodeID == r.kafka.NodeID {
			return fmt.Sprintf("%s (brokerName %s, brokerId %d)", addr, lb.name, lb.id)
		}
	}
	return ""
}

func (t *table) kafkaCluster(cluster string) KafkaCluster {
	kc := KafkaCluster{Brokers: []KafkaBroker{}, Topics: map[string][]KafkaTopicGroup{}}
	names := t.clusters[cluster]
	for addr, lb := range t.live {
		if lb.cluster != cluster || lb.kafka == nil {
			continue
		}
		kc.Brokers = append(kc.Brokers, KafkaBroker{BrokerName: lb.name, BrokerID: lb.id, Addr: addr,
			KafkaAddr: lb.kafka.Addr, NodeID: lb.kafka.NodeID, Epoch: lb.kafka.Epoch, InSync: lb.kafka.InSync, Rack: lb.kafka.Rack})
	}
	slices.SortFunc(kc.Brokers, func(a, b KafkaBroker) int {
		if c := strings.Compare(a.BrokerName, b.BrokerName); c != 0 {
			return c
		}
		return int(a.BrokerID - b.BrokerID)
	})
	for topic, qds := range t.topics {
		var groups []KafkaTopicGroup
		for _, name := range slices.Sorted(maps.Keys(qds)) {
			if _, ok := names[name]; !ok {
				continue
			}
			qd := qds[name]
			groups = append(groups, KafkaTopicGroup{BrokerName: name, ReadQueueNums: qd.ReadQueueNums,
				WriteQueueNums: qd.WriteQueueNums, Perm: qd.Perm})
		}
		if len(groups) > 0 {
			kc.Topics[topic] = groups
		}
	}
	return kc
}

func (s *Server) handleKafkaCluster(_ *remoting.Conn, req *remoting.Command) *remoting.Command {
	cluster := req.Ext("clusterName")
	if cluster == "" {
		return req.NewResponse(remoting.ResSystemError, "namesrv: get kafka cluster: clusterName is required")
	}
	s.mu.RLock()
	kc := s.t.kafkaCluster(cluster)
	s.mu.RUnlock()
	return jsonResponse(req, kc)
}

// GetKafkaCluster asks a NameServer for cluster's Kafka view. A NameServer
// that does not know the request (a Java one) answers
// REQUEST_CODE_NOT_SUPPORTED, returned as an error.
func GetKafkaCluster(ctx context.Context, client *remoting.Client, cluster string) (KafkaCluster, error) {
	resp, err := client.Invoke(ctx, remoting.NewRequest(remoting.ReqGetKafkaCluster, map[string]string{"clusterName": cluster}, nil))
	if err != nil {
		return KafkaCluster{}, fmt.Errorf("namesrv: get kafka cluster: %w", err)
	}
	if resp.Code != remoting.ResSuccess {
		return KafkaCluster{}, fmt.Errorf("namesrv: get kafka cluster: %s: %s", remoting.ResponseCode(resp.Code), resp.Remark)
	}
	var kc KafkaCluster
	if err := json.Unmarshal(resp.Body, &kc); err != nil {
		return KafkaCluster{}, fmt.Errorf("namesrv: get kafka cluster: body: %w", err)
	}
	return kc, nil
}
