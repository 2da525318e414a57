package console

import "net/http"

// apiReplication answers GET /api/replication: every broker group with
// each member's replication state (role, epoch, log end, confirmed
// offset), the master's view of each slave (in sync, lag in bytes and
// seconds, last ack) and the replicas connected but not registered
// (admin.BrokerGroups). Read-only.
func (c *Console) apiReplication(w http.ResponseWriter, r *http.Request) {
	gs, err := c.cfg.Admin.BrokerGroups(r.Context())
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, gs)
}
