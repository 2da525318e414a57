package namesrv

// The AMQP view of a cluster. A master running an AMQP door adds to its
// REGISTER_BROKER ext fields (which Java NameServers and RocketMQ clients
// never read):
//
//	amqpAddr     host:port its AMQP door listens on for the cluster's
//	             members (absent: no plain AMQP door)
//	amqpsAddr    host:port of its AMQP-over-TLS door (absent: none)
//
// The NameServer keeps them with the broker's live entry.
// GET_AMQP_CLUSTER (Keel's request 10441, ext clusterName) answers the
// live members of the cluster that registered one, as JSON
// (AMQPCluster). An AMQP door finds there the other groups' doors it
// forwards to (docs/amqp.md, "A cluster of broker groups"); which queues
// each group holds is asked of the groups themselves, never stored here.

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"slices"
	"strings"

	"github.com/keelmq/keel/internal/remoting"
)

// AMQPExt returns the registration ext fields carrying an AMQP door's
// addresses: plain and TLS ("": none).
func AMQPExt(addr, tlsAddr string) map[string]string {
	ext := map[string]string{}
	if addr != "" {
		ext["amqpAddr"] = addr
	}
	if tlsAddr != "" {
		ext["amqpsAddr"] = tlsAddr
	}
	return ext
}

// decodeAMQPAddr reads the ext field key (amqpAddr, amqpsAddr).
func decodeAMQPAddr(req *remoting.Command, key string) (string, error) {
	addr := req.Ext(key)
	if addr == "" {
		return "", nil
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return "", fmt.Errorf("bad %s %q: %v", key, addr, err)
	}
	return addr, nil
}

// AMQPCluster is the GET_AMQP_CLUSTER body.
type AMQPCluster struct {
	Members []AMQPMember `json:"members"` // by brokerName, then brokerId
}

// AMQPMember is one live broker of the cluster with an AMQP door.
type AMQPMember struct {
	BrokerName string `json:"brokerName"`
	BrokerID   int64  `json:"brokerId"`
	Addr       string `json:"addr"`                // the RocketMQ address
	AMQPAddr   string `json:"amqpAddr"`            // "": no plain door
	AMQPSAddr  string `json:"amqpsAddr,omitempty"` // its AMQP-over-TLS door ("": none)
}

func (t *table) amqpCluster(cluster string) AMQPCluster {
	ac := AMQPCluster{Members: []AMQPMember{}}
	for addr, lb := range t.live {
		if lb.cluster != cluster || lb.amqpAddr == "" && lb.amqpsAddr == "" {
			continue
		}
		ac.Members = append(ac.Members, AMQPMember{BrokerName: lb.name, BrokerID: lb.id, Addr: addr, AMQPAddr: lb.amqpAddr,
			AMQPSAddr: lb.amqpsAddr})
	}
	slices.SortFunc(ac.Members, func(a, b AMQPMember) int {
		if c := strings.Compare(a.BrokerName, b.BrokerName); c != 0 {
			return c
		}
		return int(a.BrokerID - b.BrokerID)
	})
	return ac
}

func (s *Server) handleAMQPCluster(_ *remoting.Conn, req *remoting.Command) *remoting.Command {
	cluster := req.Ext("clusterName")
	if cluster == "" {
		return req.NewResponse(remoting.ResSystemError, "namesrv: get amqp cluster: clusterName is required")
	}
	s.mu.RLock()
	ac := s.t.amqpCluster(cluster)
	s.mu.RUnlock()
	return jsonResponse(req, ac)
}

// GetAMQPCluster asks a NameServer for cluster's AMQP doors. A NameServer
// that does not know the request (a Java one) answers
// REQUEST_CODE_NOT_SUPPORTED, returned as an error.
func GetAMQPCluster(ctx context.Context, client *remoting.Client, cluster string) (AMQPCluster, error) {
	resp, err := client.Invoke(ctx, remoting.NewRequest(remoting.ReqGetAMQPCluster, map[string]string{"clusterName": cluster}, nil))
	if err != nil {
		return AMQPCluster{}, fmt.Errorf("namesrv: get amqp cluster: %w", err)
	}
	if resp.Code != remoting.ResSuccess {
		return AMQPCluster{}, fmt.Errorf("namesrv: get amqp cluster: %s: %s", remoting.ResponseCode(resp.Code), resp.Remark)
	}
	var ac AMQPCluster
	if err := json.Unmarshal(resp.Body, &ac); err != nil {
		return AMQPCluster{}, fmt.Errorf("namesrv: get amqp cluster: body: %w", err)
	}
	return ac, nil
}
