package console

import "net/http"

// apiCorrupt answers GET /api/corrupt: per broker, the records its store
// isolated because they failed verification (never delivered; consumers
// continue after them), its read faults and its scrubber's status
// (admin.IsolatedRecords). Read-only.
func (c *Console) apiCorrupt(w http.ResponseWriter, r *http.Request) {
	bs, err := c.cfg.Admin.IsolatedRecords(r.Context())
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, bs)
}
