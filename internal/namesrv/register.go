package namesrv

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"strconv"
	"time"

	"github.com/keelmq/keel/internal/remoting"
)

// Registration is what a broker tells the NameServer about itself.
type Registration struct {
	Cluster      string
	BrokerName   string
	BrokerAddr   string // host:port clients dial; IPv6 as [addr]:port
	BrokerID     int64  // 0 = master
	HAServerAddr string
	Topics       map[string]TopicConfig // keyed by topic name
	// MasterEpoch, if not 0, is sent as masterEpoch: the controller's
	// epoch of a master (the NameServer ignores a master below the epoch
	// it holds).
	MasterEpoch uint32
	Kafka       *KafkaRegistration // nil: no Kafka door
	AMQPAddr    string             // "": no AMQP door (amqp.go)
	AMQPSAddr   string             // "": no AMQP-over-TLS door
}

// RegisterResult is the NameServer's answer to a registration.
type RegisterResult struct {
	MasterAddr   string // for a slave: its master's address, if registered
	HAServerAddr string // for a slave: the master's HA address
	// KafkaRefused says why the registration's Kafka door was left out
	// (its node id is taken); the rest of the registration stands.
	KafkaRefused string
}

// RegisterBroker sends REGISTER_BROKER with the full topic table as Java's
// non-compressed RegisterBrokerBody. Brokers call it at start, every 30 s
// and whenever their topics change.
func RegisterBroker(ctx context.Context, client *remoting.Client, reg Registration) error {
	_, err := RegisterBrokerResult(ctx, client, reg)
	return err
}

// RegisterBrokerResult is RegisterBroker returning the NameServer's answer.
func RegisterBrokerResult(ctx context.Context, client *remoting.Client, reg Registration) (RegisterResult, error) {
	body, err := encodeRegisterBody(reg.Topics, time.Now())
	if err != nil {
		return RegisterResult{}, err
	}
	ext := map[string]string{
		"brokerName":   reg.BrokerName,
		"brokerAddr":   reg.BrokerAddr,
		"clusterName":  reg.Cluster,
		"haServerAddr": reg.HAServerAddr,
		"brokerId":     strconv.FormatInt(reg.BrokerID, 10),
		"compressed":   "false",
		"bodyCrc32":    strconv.FormatInt(bodyCRC(body), 10),
	}
	if reg.Kafka != nil {
		maps.Copy(ext, reg.Kafka.Ext())
	}
	maps.Copy(ext, AMQPExt(reg.AMQPAddr, reg.AMQPSAddr))
	if reg.MasterEpoch != 0 {
		ext["masterEpoch"] = strconv.FormatUint(uint64(reg.MasterEpoch), 10)
	}
	req := remoting.NewRequest(remoting.ReqRegisterBroker, ext, body)
	resp, err := client.Invoke(ctx, req)
	if err != nil {
		return RegisterResult{}, fmt.Errorf("namesrv: register broker %s: %w", reg.BrokerAddr, err)
	}
	if resp.Code != remoting.ResSuccess {
		return RegisterResult{}, fmt.Errorf("namesrv: register broker %s: %s: %s",
			reg.BrokerAddr, remoting.ResponseCode(resp.Code), resp.Remark)
	}
	return RegisterResult{MasterAddr: resp.Ext("masterAddr"), HAServerAddr: resp.Ext("haServerAddr"),
		KafkaRefused: resp.Ext("kafkaRefused")}, nil
}

func encodeRegisterBody(topics map[string]TopicConfig, now time.Time) ([]byte, error) {
	table := make(map[string]wireTopicConfig, len(topics))
	for name, tc := range topics {
		if tc.TopicName == "" {
			tc.TopicName = name
		}
		table[name] = wireTopicConfig{
			Attributes: map[string]string{}, Order: tc.Order, Perm: tc.Perm,
			ReadQueueNums: tc.ReadQueueNums, TopicFilterType: "SINGLE_TAG", TopicName: tc.TopicName,
			TopicSysFlag: tc.TopicSysFlag, WriteQueueNums: tc.WriteQueueNums,
		}
	}
	body, err := json.Marshal(registerBody{
		FilterServerList: []string{},
		TopicConfigSerializeWrapper: topicConfigWrapper{
			DataVersion:      dataVersion{Timestamp: now.UnixMilli()},
			TopicConfigTable: table,
		},
	})
	if err != nil {
		return nil, fmt.Errorf("namesrv: encode registration: %w", err)
	}
	return body, nil
}

// UnregisterBroker sends UNREGISTER_BROKER, e.g. on a clean broker
// shutdown.
func UnregisterBroker(ctx context.Context, client *remoting.Client, reg Registration) error {
	req := remoting.NewRequest(remoting.ReqUnregisterBroker, map[string]string{
		"brokerName":  reg.BrokerName,
		"brokerAddr":  reg.BrokerAddr,
		"clusterName": reg.Cluster,
		"brokerId":    strconv.FormatInt(reg.BrokerID, 10),
	}, nil)
	resp, err := client.Invoke(ctx, req)
	if err != nil {
		return fmt.Errorf("namesrv: unregister broker %s: %w", reg.BrokerAddr, err)
	}
	if resp.Code != remoting.ResSuccess {
		return fmt.Errorf("namesrv: unregister broker %s: %s: %s", reg.BrokerAddr, remoting.ResponseCode(resp.Code), resp.Remark)
	}
	return nil
}
