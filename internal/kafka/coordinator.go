package kafka

// FindCoordinator: this broker (its node id) is the coordinator of every
// group (key type 0) and of every transactional id (key type 1, txn.go).
// Other key types are refused with INVALID_REQUEST. FindCoordinator v0
// stays in range: librdkafka enables LZ4 and groups only with it.

import "github.com/twmb/franz-go/pkg/kmsg"

func (s *Server) findCoordinator(req *kmsg.FindCoordinatorRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.FindCoordinatorResponse)
	code := errNone
	var msg *string
	switch req.CoordinatorType {
	case 0:
	case 1:
		code = s.txnReady()
	default:
		code, msg = errInvalidRequest, kmsg.StringPtr("unknown coordinator type")
	}
	if req.Version >= 4 {
		for _, k := range req.CoordinatorKeys {
			c := kmsg.NewFindCoordinatorResponseCoordinator()
			c.Key, c.ErrorCode, c.ErrorMessage = k, code, msg
			if code == errNone {
				c.NodeID, c.Host, c.Port = s.cfg.NodeID, s.cfg.AdvertisedHost, s.advPort.Load()
			} else {
				c.NodeID, c.Port = -1, -1
			}
			resp.Coordinators = append(resp.Coordinators, c)
		}
		return resp
	}
	resp.ErrorCode, resp.ErrorMessage = code, msg
	if code == errNone {
		resp.NodeID, resp.Host, resp.Port = s.cfg.NodeID, s.cfg.AdvertisedHost, s.advPort.Load()
	} else {
		resp.NodeID, resp.Port = -1, -1
	}
	return resp
}
