package console

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/keelmq/keel/internal/admin"
)

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", " ")
	enc.Encode(v)
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"error": msg})
}

// fail maps an admin error to a status: 404 not found, 409 exists or
// already resent, 502
// for everything the cluster answered or failed to answer.
func fail(w http.ResponseWriter, err error) {
	msg := humanError(err)
	switch {
	case errors.Is(err, admin.ErrNotFound):
		writeError(w, http.StatusNotFound, msg)
	case errors.Is(err, admin.ErrTopicExists), errors.Is(err, admin.ErrAlreadyResent):
		writeError(w, http.StatusConflict, msg)
	default:
		writeError(w, http.StatusBadGateway, msg)
	}
}

// humanError is err's text without the Go package prefixes ("admin: ")
// that help in a log but not on a page.
func humanError(err error) string {
	return strings.ReplaceAll(err.Error(), "admin: ", "")
}

// failNotFound answers 404 with msg when err is a not-found error, and
// as fail otherwise.
func failNotFound(w http.ResponseWriter, err error, msg string) {
	if errors.Is(err, admin.ErrNotFound) {
		writeError(w, http.StatusNotFound, msg)
		return
	}
	fail(w, err)
}

// writeAction guards an action: write access, the console's header and a
// JSON body.
func (c *Console) writeAction(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		switch {
		case !c.cfg.Write:
			writeError(w, http.StatusForbidden, "the console is read-only; start keel serve with --console-write to allow actions")
		case r.Header.Get("X-Keel-Console") != "1":
			writeError(w, http.StatusForbidden, "missing header X-Keel-Console: 1")
		default:
			r.Body = http.MaxBytesReader(w, r.Body, MaxRequestBodyBytes)
			h(w, r)
		}
	}
}

func decodeBody(r *http.Request, v any) error {
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("bad request body: %w", err)
	}
	return nil
}

func (c *Console) apiInfo(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"version": c.cfg.Version, "write": c.cfg.Write,
		"sampleIntervalSeconds": c.cfg.SampleInterval.Seconds()})
}

type overview struct {
	Brokers []admin.BrokerRuntime `json:"brokers"`
	// Topics counts user topics (kind normal); TopicKinds counts every
	// kind, as the keel_topics gauge does (message.KindOfTopic).
	Topics      int            `json:"topics"`
	TopicKinds  map[string]int `json:"topicKinds"`
	Messages    int64          `json:"messages"`
	Groups      int            `json:"groups"`
	Lag         int64          `json:"lag"`
	DLQMessages int64          `json:"dlqMessages"`
	Throughput  []Rate         `json:"throughput"`
	LagHistory  []LagPoint     `json:"lagHistory"` // total over groups
	Local       *LocalStats    `json:"local,omitempty"`
}

func (c *Console) apiOverview(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	var o overview
	var err error
	if o.Brokers, err = c.cfg.Admin.Runtime(ctx); err != nil {
		fail(w, err)
		return
	}
	topics, err := c.cfg.Admin.Topics(ctx, true, true)
	if err != nil {
		fail(w, err)
		return
	}
	o.TopicKinds = map[string]int{admin.KindNormal: 0, admin.KindRetry: 0, admin.KindDLQ: 0, admin.KindSystem: 0}
	for _, t := range topics {
		o.TopicKinds[t.Kind]++
		if t.Kind == admin.KindNormal {
			o.Topics++
			o.Messages += t.Messages
		}
	}
	groups, err := c.cfg.Admin.Groups(ctx, false)
	if err != nil {
		fail(w, err)
		return
	}
	o.Groups = len(groups)
	for _, g := range groups {
		o.Lag += g.Lag
		o.DLQMessages += g.DLQMessages
	}
	ss := c.hist.all()
	o.Throughput = rates(ss)
	o.LagHistory = totalLag(ss)
	if c.cfg.Local != nil {
		l := c.cfg.Local()
		o.Local = &l
	}
	writeJSON(w, http.StatusOK, o)
}

func totalLag(ss []Sample) []LagPoint {
	out := make([]LagPoint, 0, len(ss))
	for _, s := range ss {
		var n int64
		for _, v := range s.Lag {
			n += v
		}
		out = append(out, LagPoint{Time: s.Time, Lag: n})
	}
	return out
}

func (c *Console) apiTopics(w http.ResponseWriter, r *http.Request) {
	ts, err := c.cfg.Admin.Topics(r.Context(), r.URL.Query().Get("all") == "1", true)
	if err != nil {
		fail(w, err)
		return
	}
	if ts == nil {
		ts = []admin.Topic{}
	}
	writeJSON(w, http.StatusOK, ts)
}

func (c *Console) apiTopic(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("topic")
	d, err := c.cfg.Admin.DescribeTopic(r.Context(), name)
	if err != nil {
		failNotFound(w, err, fmt.Sprintf("There is no topic named %q on any broker of this cluster.", name))
		return
	}
	writeJSON(w, http.StatusOK, d)
}

// apiBrowse lists a topic's messages stored from a time on (?from=Unix ms,
// &limit=N up to admin.MaxBrowse, default 50), oldest first.
func (c *Console) apiBrowse(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("topic")
	q := r.URL.Query()
	from, err := parseMs(q.Get("from"))
	if err != nil || q.Get("from") == "" {
		writeError(w, http.StatusBadRequest, "give from= as Unix milliseconds (the time to list messages from)")
		return
	}
	limit := DefaultBrowseLimit
	if s := q.Get("limit"); s != "" {
		if limit, err = strconv.Atoi(s); err != nil || limit < 1 || limit > admin.MaxBrowse {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("limit %q: want 1..%d", s, admin.MaxBrowse))
			return
		}
	}
	ms, err := c.cfg.Admin.Browse(r.Context(), name, from, limit)
	if err != nil {
		failNotFound(w, err, fmt.Sprintf("There is no topic named %q on any broker of this cluster.", name))
		return
	}
	if ms == nil {
		ms = []admin.Message{}
	}
	writeJSON(w, http.StatusOK, ms)
}

type createTopic struct {
	Topic  string `json:"topic"`
	Queues int32  `json:"queues"`
	Perm   string `json:"perm"`
	Order  bool   `json:"order"`
}

func (c *Console) apiCreateTopic(w http.ResponseWriter, r *http.Request) {
	var req createTopic
	if err := decodeBody(r, &req); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if req.Perm == "" {
		req.Perm = "rw"
	}
	perm, err := admin.ParsePerm(req.Perm)
	if req.Topic == "" || req.Queues < 1 || err != nil {
		writeError(w, http.StatusBadRequest, "need a topic name, queues >= 1 and perm rw, r or w")
		return
	}
	spec := admin.TopicSpec{Topic: req.Topic, ReadQueues: req.Queues, WriteQueues: req.Queues, Perm: perm, Order: req.Order}
	if err := c.cfg.Admin.CreateTopic(r.Context(), spec); err != nil {
		fail(w, err)
		return
	}
	c.log.Info("console: topic created", "topic", req.Topic, "queues", req.Queues, "remote", r.RemoteAddr)
	c.apiTopicNamed(w, r, req.Topic, http.StatusCreated)
}

func (c *Console) apiTopicNamed(w http.ResponseWriter, r *http.Request, name string, status int) {
	t, err := c.cfg.Admin.Topic(r.Context(), name)
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, status, t)
}

func (c *Console) apiGroups(w http.ResponseWriter, r *http.Request) {
	gs, err := c.cfg.Admin.Groups(r.Context(), r.URL.Query().Get("all") == "1")
	if err != nil {
		fail(w, err)
		return
	}
	if gs == nil {
		gs = []admin.Group{}
	}
	writeJSON(w, http.StatusOK, gs)
}

type groupView struct {
	admin.GroupDetail
	LagTrend []LagPoint `json:"lagTrend"`
}

func (c *Console) apiGroup(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("group")
	d, err := c.cfg.Admin.DescribeGroup(r.Context(), name)
	if err != nil {
		failNotFound(w, err, fmt.Sprintf("No broker of this cluster knows a consumer group named %q.", name))
		return
	}
	if d.Queues == nil {
		d.Queues = []admin.QueueLag{}
	}
	if d.Clients == nil {
		d.Clients = []admin.Member{}
	}
	trend := lagTrend(c.hist.all(), name)
	trend = append(trend, LagPoint{Time: c.cfg.Now(), Lag: d.Lag}) // the trend ends now
	writeJSON(w, http.StatusOK, groupView{GroupDetail: d, LagTrend: trend})
}

func (c *Console) apiMessages(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	id, topic, key := q.Get("id"), q.Get("topic"), q.Get("key")
	var ms []admin.Message
	var err error
	switch {
	case id != "":
		ms, err = c.cfg.Admin.GetMessage(r.Context(), id, topic)
	case topic != "" && key != "":
		var begin, end time.Time
		if begin, err = parseMs(q.Get("begin")); err == nil {
			end, err = parseMs(q.Get("end"))
		}
		if err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
		ms, err = c.cfg.Admin.QueryByKey(r.Context(), topic, key, begin, end, 0)
	default:
		writeError(w, http.StatusBadRequest, "give id (and optionally topic), or topic and key")
		return
	}
	if err != nil {
		fail(w, err)
		return
	}
	if ms == nil {
		ms = []admin.Message{}
	}
	writeJSON(w, http.StatusOK, ms)
}

// parseMs reads a Unix-milliseconds query value ("" = unbounded).
func parseMs(s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return time.Time{}, fmt.Errorf("time %q: want Unix milliseconds", s)
	}
	return time.UnixMilli(n), nil
}

func (c *Console) apiDLQ(w http.ResponseWriter, r *http.Request) {
	limit, _ := strconv.Atoi(r.URL.Query().Get("limit"))
	d, err := c.cfg.Admin.ListDLQ(r.Context(), r.PathValue("group"), limit)
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, d)
}

type resendRequest struct {
	MsgID string `json:"msgId"`
	All   bool   `json:"all"`
	// Again resends a dead letter (msgId) that was resent before; without
	// it such a resend is refused with 409 and "again": true, and the page
	// offers it.
	Again bool `json:"again"`
}

func (c *Console) apiResend(w http.ResponseWriter, r *http.Request) {
	var req resendRequest
	if err := decodeBody(r, &req); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if (req.MsgID == "") == !req.All {
		writeError(w, http.StatusBadRequest, `give exactly one of "msgId" or "all": true`)
		return
	}
	group := r.PathValue("group")
	var rs []admin.Resent
	var err error
	if req.All {
		rs, err = c.cfg.Admin.ResendAll(r.Context(), group)
	} else {
		var one admin.Resent
		if one, err = c.cfg.Admin.ResendDLQWith(r.Context(), group, req.MsgID, admin.ResendOptions{Force: req.Again}); err == nil {
			rs = []admin.Resent{one}
		}
	}
	if errors.Is(err, admin.ErrAlreadyResent) && !req.All {
		writeJSON(w, http.StatusConflict, map[string]any{"error": humanError(err), "again": true})
		return
	}
	c.log.Info("console: dead letters resent", "group", group, "count", len(rs), "err", err, "remote", r.RemoteAddr)
	if err != nil && len(rs) > 0 { // stopped part way: say what was resent
		writeJSON(w, http.StatusBadGateway, map[string]any{"error": err.Error(), "resent": rs})
		return
	}
	if err != nil {
		fail(w, err)
		return
	}
	if rs == nil {
		rs = []admin.Resent{}
	}
	writeJSON(w, http.StatusOK, rs)
}

func (c *Console) apiTransactions(w http.ResponseWriter, r *http.Request) {
	ts, err := c.cfg.Admin.PendingTransactions(r.Context(), r.URL.Query().Get("topic"), r.URL.Query().Get("group"), 500)
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, ts)
}
