package console

import "net/http"

// apiAMQP answers GET /api/amqp: per broker, its AMQP queues (depth,
// unacked, consumers, age of the oldest unsettled message, counters) and
// exchanges (admin.AMQP, Keel's LIST_AMQP). Read-only.
func (c *Console) apiAMQP(w http.ResponseWriter, r *http.Request) {
	bs, err := c.cfg.Admin.AMQP(r.Context())
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, bs)
}
