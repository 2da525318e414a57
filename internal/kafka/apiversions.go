package kafka

// ApiVersions: the keys served and the version ranges advertised
// (frontdoors.md 1.3). Produce serves 0-11: versions 0-2 carry message
// sets of magic 0/1, upgraded to batches when produced (librdkafka up to
// 2.11.0 also turns compression off unless the range contains 0). Fetch stops at 12 and Produce at 11: later versions address
// topics by id. An ApiVersions request above the range is answered in v0
// with UNSUPPORTED_VERSION and the list filled (KIP-511), so the client
// retries lower.

import (
	"slices"

	"github.com/twmb/franz-go/pkg/kmsg"
)

type apiRange struct{ min, max int16 }

// apis is the one table of served keys.
var apis = map[int16]apiRange{
	0:  {0, 11}, // Produce (0-2: message sets upgraded)
	1:  {4, 12}, // Fetch
	2:  {1, 7},  // ListOffsets
	3:  {0, 12}, // Metadata
	8:  {2, 10}, // OffsetCommit (v9: KIP-848 member epochs; v10: topics by id)
	9:  {1, 10}, // OffsetFetch (v8: several groups, v9: member epochs; v10: topics by id)
	10: {0, 4},  // FindCoordinator
	11: {0, 9},  // JoinGroup
	12: {0, 4},  // Heartbeat
	13: {0, 5},  // LeaveGroup
	14: {0, 5},  // SyncGroup
	15: {0, 5},  // DescribeGroups
	16: {0, 5},  // ListGroups (v5: types filter)
	17: {0, 1},  // SaslHandshake (advertised with access control on)
	18: {0, 3},  // ApiVersions
	19: {0, 7},  // CreateTopics
	20: {0, 6},  // DeleteTopics (v6 may name topics by id)
	21: {0, 2},  // DeleteRecords
	22: {0, 4},  // InitProducerId (idempotence; transactional ids: txn.go)
	23: {0, 4},  // OffsetForLeaderEpoch (epochs.go)
	24: {0, 3},  // AddPartitionsToTxn (v4+: the broker-to-broker form)
	25: {0, 3},  // AddOffsetsToTxn
	26: {0, 3},  // EndTxn
	28: {0, 3},  // TxnOffsetCommit
	29: {0, 3},  // DescribeAcls (acls.go)
	30: {0, 3},  // CreateAcls
	31: {0, 3},  // DeleteAcls
	36: {0, 2},  // SaslAuthenticate (advertised with access control on)
	32: {0, 4},  // DescribeConfigs
	33: {0, 2},  // AlterConfigs
	37: {0, 3},  // CreatePartitions
	42: {0, 2},  // DeleteGroups
	43: {0, 2},  // ElectLeaders (replicas.go)
	44: {0, 1},  // IncrementalAlterConfigs
	45: {0, 1},  // AlterPartitionAssignments (replicas.go)
	46: {0, 0},  // ListPartitionReassignments (replicas.go)
	47: {0, 0},  // OffsetDelete
	48: {0, 1},  // DescribeClientQuotas (quotas.go)
	49: {0, 1},  // AlterClientQuotas (quotas.go)
	50: {0, 0},  // DescribeUserScramCredentials (scram.go)
	51: {0, 0},  // AlterUserScramCredentials (scram.go)
	60: {0, 1},  // DescribeCluster (v2: fenced brokers, KRaft only)
	61: {0, 0},  // DescribeProducers (txnadmin.go)
	65: {0, 0},  // DescribeTransactions (txnadmin.go)
	66: {0, 1},  // ListTransactions (v2: an id pattern)
	68: {0, 1},  // ConsumerGroupHeartbeat (KIP-848, group848.go)
	69: {0, 1},  // ConsumerGroupDescribe (group848_describe.go)
}

func (s *Server) apiKeys() []kmsg.ApiVersionsResponseApiKey {
	keys := make([]kmsg.ApiVersionsResponseApiKey, 0, len(apis))
	for _, k := range sortedAPIKeys {
		if (k == 17 || k == 36) && s.cfg.ACL == nil {
			continue
		}
		r := apis[k]
		keys = append(keys, kmsg.ApiVersionsResponseApiKey{ApiKey: k, MinVersion: r.min, MaxVersion: r.max})
	}
	return keys
}

var sortedAPIKeys = func() []int16 {
	keys := make([]int16, 0, len(apis))
	for k := range apis {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}()

func (s *Server) apiVersions(req *kmsg.ApiVersionsRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.ApiVersionsResponse)
	resp.ApiKeys = s.apiKeys()
	return resp
}

// apiVersionsUnsupported answers an ApiVersions of a version above 3.
func (s *Server) apiVersionsUnsupported() kmsg.Response {
	resp := kmsg.NewPtrApiVersionsResponse()
	resp.SetVersion(0)
	resp.ErrorCode = errUnsupportedVersion
	resp.ApiKeys = s.apiKeys()
	return resp
}
