package console

import "net/http"

// apiKafka answers GET /api/kafka: per broker, the Kafka door's consumer
// groups (state, members, assignments) and open connections (admin.Kafka,
// Keel's LIST_KAFKA). Read-only.
func (c *Console) apiKafka(w http.ResponseWriter, r *http.Request) {
	bs, err := c.cfg.Admin.Kafka(r.Context())
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, bs)
}

// apiKafkaGroup answers GET /api/kafka/groups/{group}: the group as
// kafka-consumer-groups.sh --describe shows it (admin.DescribeKafkaGroup).
func (c *Console) apiKafkaGroup(w http.ResponseWriter, r *http.Request) {
	group := r.PathValue("group")
	d, err := c.cfg.Admin.DescribeKafkaGroup(r.Context(), group)
	if err != nil {
		failNotFound(w, err, `no broker knows a Kafka consumer group named "`+group+`"`)
		return
	}
	writeJSON(w, http.StatusOK, d)
}
