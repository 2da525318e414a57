package kafka

// Client quotas (DescribeClientQuotas, AlterClientQuotas): produce and
// fetch byte rates per user and client id, as Kafka's
// producer_byte_rate and consumer_byte_rate, kept in
// <DataDir>/config/kafkaQuotas.json (rewritten durably on every change,
// read at start; in memory only without a DataDir).
//
// Entities are Kafka's: user, client-id, or both, each a name or the
// default (a null name). A connection's user is its SASL account, or
// ANONYMOUS without authentication (as Kafka's principal); its client id
// the request header's. The quota that applies is Kafka's first match,
// for each of the two keys apart:
//
//	user=u, client-id=c    user=default, client-id=c    client-id=c
//	user=u, client-id=def  user=default, client-id=def  client-id=default
//	user=u                 user=default
//
// (columns read top to bottom, left to right), and, as in Kafka, the
// bytes are counted per user and/or client id the matching entity names:
// a default quota gives each user (or client id) its own. Other keys
// (request_percentage, controller_mutation_rate, connection_creation_rate)
// and ip entities are refused with INVALID_REQUEST.
//
// Throttling: the bytes of a Produce request's record batches and of a
// Fetch response's are charged to the quota's meter, a virtual clock
// that advances by bytes/rate from the later of now and where it was
// (so the admitted bytes over any time T are at most rate×(T + 1 s) plus
// one request). When the meter is more than one second ahead of now, the
// response reports the difference as throttle_time_ms and the connection
// is muted that long: for versions where the client waits by itself
// (KIP-219: Produce 6+, Fetch 8+) after the response is sent, before it
// for older versions, as Kafka does; acks=0 produce requests, which get
// no response, mute the connection alike. At most maxQuotaMeters meters
// are kept: past it, those behind now are forgotten, and if all are
// ahead the new users and client ids of an entity share one meter.

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keelmq/keel/internal/vfs"
	"github.com/twmb/franz-go/pkg/kmsg"
)

const (
	quotaProduce     = "producer_byte_rate"
	quotaFetch       = "consumer_byte_rate"
	entityUser       = "user"
	entityClientID   = "client-id"
	entityIP         = "ip"
	anonymousUser    = "ANONYMOUS"
	quotaBurst       = time.Second
	maxQuotaFile     = 4 << 20
	maxQuotaMeters   = 10000
	quotaFileVersion = 1
)

// quotaEntity is a quota's entity: a user, a client id or both, each
// named or the default.
type quotaEntity struct {
	HasUser, HasClient         bool
	UserDefault, ClientDefault bool
	User, Client               string
}

func (e quotaEntity) less(o quotaEntity) int {
	return strings.Compare(e.String(), o.String())
}

func (e quotaEntity) String() string {
	var parts []string
	if e.HasUser {
		parts = append(parts, "user="+defaultOr(e.UserDefault, e.User))
	}
	if e.HasClient {
		parts = append(parts, "client-id="+defaultOr(e.ClientDefault, e.Client))
	}
	return strings.Join(parts, ",")
}

func defaultOr(def bool, name string) string {
	if def {
		return "<default>"
	}
	return name
}

// quotaMeterKey names one meter: the key, the entity that set the
// quota, and the connection's user and client id where the entity has
// them.
type quotaMeterKey struct {
	key          string
	entity       quotaEntity
	user, client string
}

// quotaTable holds the quotas and their meters.
type quotaTable struct {
	fs   vfs.FS
	path string // "": in memory only

	wmu sync.Mutex // serialises changes and their writes

	active atomic.Bool // there are quotas (read without mu on every request)

	mu     sync.RWMutex
	quotas map[quotaEntity]map[string]float64
	meters map[quotaMeterKey]time.Time // the meter's virtual clock
}

type quotaFile struct {
	Version int               `json:"version"`
	Quotas  []quotaFileEntity `json:"quotas"`
}

type quotaFileEntity struct {
	Entity []quotaFileComponent `json:"entity"`
	Values map[string]float64   `json:"values"`
}

type quotaFileComponent struct {
	Type string  `json:"type"`
	Name *string `json:"name"` // null: the default
}

// loadQuotas reads the quotas file (a missing file: no quotas).
func loadQuotas(fs vfs.FS, dataDir string) (*quotaTable, error) {
	q := &quotaTable{fs: fs, quotas: map[quotaEntity]map[string]float64{}, meters: map[quotaMeterKey]time.Time{}}
	if dataDir == "" || fs == nil {
		return q, nil
	}
	q.path = filepath.Join(dataDir, "config", "kafkaQuotas.json")
	f, err := fs.OpenFile(q.path, os.O_RDONLY, 0)
	if errors.Is(err, os.ErrNotExist) {
		return q, nil
	}
	if err != nil {
		return nil, fmt.Errorf("kafka: quotas: %w", err)
	}
	defer f.Close()
	size, err := f.Size()
	if err == nil && size > maxQuotaFile {
		err = fmt.Errorf("larger than %d bytes", maxQuotaFile)
	}
	if err != nil {
		return nil, fmt.Errorf("kafka: quotas %s: %w", q.path, err)
	}
	data := make([]byte, size)
	if _, err := f.ReadAt(data, 0); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("kafka: quotas %s: %w", q.path, err)
	}
	var qf quotaFile
	if err := json.Unmarshal(data, &qf); err != nil {
		return nil, fmt.Errorf("kafka: quotas %s: %w", q.path, err)
	}
	if qf.Version != quotaFileVersion {
		return nil, fmt.Errorf("kafka: quotas %s: version %d, want %d", q.path, qf.Version, quotaFileVersion)
	}
	for _, qe := range qf.Quotas {
		var comps []kmsg.AlterClientQuotasRequestEntryEntity
		for _, c := range qe.Entity {
			comps = append(comps, kmsg.AlterClientQuotasRequestEntryEntity{Type: c.Type, Name: c.Name})
		}
		e, msg := entityOf(comps)
		if msg != "" {
			return nil, fmt.Errorf("kafka: quotas %s: entity %v: %s", q.path, qe.Entity, msg)
		}
		for k, v := range qe.Values {
			if m := checkQuotaValue(k, v); m != "" {
				return nil, fmt.Errorf("kafka: quotas %s: %s: %s", q.path, e, m)
			}
		}
		if len(qe.Values) > 0 {
			q.quotas[e] = qe.Values
		}
	}
	q.active.Store(len(q.quotas) > 0)
	return q, nil
}

// entityOf reads an entity's components, or says why they are not one.
func entityOf(comps []kmsg.AlterClientQuotasRequestEntryEntity) (quotaEntity, string) {
	var e quotaEntity
	if len(comps) == 0 {
		return e, "the entity is empty"
	}
	for _, c := range comps {
		if c.Name != nil && *c.Name == "" {
			return e, "an entity name is empty (a null name is the default)"
		}
		switch c.Type {
		case entityUser:
			if e.HasUser {
				return e, "user is given twice"
			}
			e.HasUser, e.UserDefault = true, c.Name == nil
			if c.Name != nil {
				e.User = *c.Name
			}
		case entityClientID:
			if e.HasClient {
				return e, "client-id is given twice"
			}
			e.HasClient, e.ClientDefault = true, c.Name == nil
			if c.Name != nil {
				e.Client = *c.Name
			}
		case entityIP:
			return e, "ip quotas (connection_creation_rate) are not supported: quotas are per user and client-id"
		default:
			return e, fmt.Sprintf("unknown entity type %q (user, client-id)", c.Type)
		}
	}
	return e, ""
}

func checkQuotaValue(key string, v float64) string {
	switch key {
	case quotaProduce, quotaFetch:
	case "request_percentage", "controller_mutation_rate", "connection_creation_rate":
		return key + " is not supported: Keel honours " + quotaProduce + " and " + quotaFetch
	default:
		return fmt.Sprintf("unknown quota %q (%s, %s)", key, quotaProduce, quotaFetch)
	}
	if math.IsNaN(v) || v < 1 || v > 1<<53 {
		return fmt.Sprintf("%s must be a byte rate between 1 and 2^53", key)
	}
	return ""
}

func componentsOf(e quotaEntity) []quotaFileComponent {
	var out []quotaFileComponent
	if e.HasUser {
		c := quotaFileComponent{Type: entityUser}
		if !e.UserDefault {
			c.Name = kmsg.StringPtr(e.User)
		}
		out = append(out, c)
	}
	if e.HasClient {
		c := quotaFileComponent{Type: entityClientID}
		if !e.ClientDefault {
			c.Name = kmsg.StringPtr(e.Client)
		}
		out = append(out, c)
	}
	return out
}

// sorted returns the entities with quotas, in a stable order.
func (q *quotaTable) sorted() []quotaEntity {
	es := make([]quotaEntity, 0, len(q.quotas))
	for e := range q.quotas {
		es = append(es, e)
	}
	slices.SortFunc(es, quotaEntity.less)
	return es
}

// write persists quotas (called with wmu held).
func (q *quotaTable) write(quotas map[quotaEntity]map[string]float64) error {
	if q.path == "" {
		return nil
	}
	qf := quotaFile{Version: quotaFileVersion, Quotas: []quotaFileEntity{}}
	t := &quotaTable{quotas: quotas}
	for _, e := range t.sorted() {
		qf.Quotas = append(qf.Quotas, quotaFileEntity{Entity: componentsOf(e), Values: quotas[e]})
	}
	data, err := json.MarshalIndent(qf, "", "  ")
	if err != nil {
		return err
	}
	dir := filepath.Dir(q.path)
	if _, err := q.fs.Stat(dir); err != nil {
		if err := vfs.MkdirAllDurable(q.fs, dir, 0o755); err != nil {
			return err
		}
	}
	return vfs.WriteFileDurable(q.fs, q.path, append(data, '\n'), 0o644)
}

// rate returns the quota of key that applies to user and client, and the
// meter it is counted on.
func (q *quotaTable) rate(key, user, client string) (float64, quotaMeterKey, bool) {
	candidates := [...]quotaEntity{
		{HasUser: true, User: user, HasClient: true, Client: client},
		{HasUser: true, User: user, HasClient: true, ClientDefault: true},
		{HasUser: true, User: user},
		{HasUser: true, UserDefault: true, HasClient: true, Client: client},
		{HasUser: true, UserDefault: true, HasClient: true, ClientDefault: true},
		{HasUser: true, UserDefault: true},
		{HasClient: true, Client: client},
		{HasClient: true, ClientDefault: true},
	}
	for _, e := range candidates {
		if v, ok := q.quotas[e][key]; ok {
			m := quotaMeterKey{key: key, entity: e}
			if e.HasUser {
				m.user = user
			}
			if e.HasClient {
				m.client = client
			}
			return v, m, true
		}
	}
	return 0, quotaMeterKey{}, false
}

// charge counts n bytes of key for user and client at now and returns
// how long the connection is to be throttled.
func (q *quotaTable) charge(key, user, client string, n int, now time.Time) time.Duration {
	if !q.active.Load() || n <= 0 {
		return 0
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	rate, mk, ok := q.rate(key, user, client)
	if !ok {
		return 0
	}
	t, known := q.meters[mk]
	if !known && len(q.meters) >= maxQuotaMeters { // forget the meters that are behind now
		for k, t := range q.meters {
			if t.Before(now) {
				delete(q.meters, k)
			}
		}
		if len(q.meters) >= maxQuotaMeters {
			// Still full: the entity's users and client ids beyond the
			// bound share one meter (throttled more, never less).
			mk.user, mk.client = "", "\x00overflow"
			t = q.meters[mk]
			known = true
		}
	}
	if !known { // the request's strings may share its frame
		mk.user, mk.client = strings.Clone(mk.user), strings.Clone(mk.client)
	}
	if t.Before(now) {
		t = now
	}
	t = t.Add(time.Duration(float64(n) / rate * float64(time.Second)))
	q.meters[mk] = t
	return max(0, min(t.Sub(now)-quotaBurst, math.MaxInt32*time.Millisecond))
}

func (s *Server) describeClientQuotas(req *kmsg.DescribeClientQuotasRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.DescribeClientQuotasResponse)
	seen := map[string]bool{}
	for _, c := range req.Components {
		msg := ""
		switch {
		case c.EntityType != entityUser && c.EntityType != entityClientID && c.EntityType != entityIP:
			msg = fmt.Sprintf("unknown entity type %q", c.EntityType)
		case seen[c.EntityType]:
			msg = c.EntityType + " is given twice"
		case c.MatchType == 0 && c.Match == nil:
			msg = "an exact match needs a name"
		case c.MatchType > 2:
			msg = "unknown match type"
		}
		if msg != "" {
			resp.ErrorCode, resp.ErrorMessage = errInvalidRequest, kmsg.StringPtr(msg)
			return resp
		}
		seen[c.EntityType] = true
	}
	q := s.quotas
	q.mu.RLock()
	defer q.mu.RUnlock()
	for _, e := range q.sorted() {
		if !quotaMatches(e, req.Components, req.Strict) {
			continue
		}
		re := kmsg.NewDescribeClientQuotasResponseEntry()
		for _, c := range componentsOf(e) {
			re.Entity = append(re.Entity, kmsg.DescribeClientQuotasResponseEntryEntity{Type: c.Type, Name: c.Name})
		}
		for _, k := range []string{quotaFetch, quotaProduce} {
			if v, ok := q.quotas[e][k]; ok {
				re.Values = append(re.Values, kmsg.DescribeClientQuotasResponseEntryValue{Key: k, Value: v})
			}
		}
		resp.Entries = append(resp.Entries, re)
	}
	return resp
}

// quotaMatches reports whether e matches every component (and, strict,
// has no other part).
func quotaMatches(e quotaEntity, comps []kmsg.DescribeClientQuotasRequestComponent, strict bool) bool {
	parts := 0
	if e.HasUser {
		parts++
	}
	if e.HasClient {
		parts++
	}
	for _, c := range comps {
		has, def, name := e.HasUser, e.UserDefault, e.User
		switch c.EntityType {
		case entityClientID:
			has, def, name = e.HasClient, e.ClientDefault, e.Client
		case entityIP:
			return false
		}
		switch {
		case !has:
			return false
		case c.MatchType == 0 && (def || name != *c.Match):
			return false
		case c.MatchType == 1 && !def:
			return false
		}
	}
	return !strict || parts == len(comps)
}

func (s *Server) alterClientQuotas(req *kmsg.AlterClientQuotasRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.AlterClientQuotasResponse)
	q := s.quotas
	q.wmu.Lock()
	defer q.wmu.Unlock()
	q.mu.RLock()
	next := make(map[quotaEntity]map[string]float64, len(q.quotas))
	for e, vs := range q.quotas {
		next[e] = maps.Clone(vs)
	}
	q.mu.RUnlock()
	changed := false
	for _, en := range req.Entries {
		re := kmsg.NewAlterClientQuotasResponseEntry()
		for _, c := range en.Entity {
			re.Entity = append(re.Entity, kmsg.AlterClientQuotasResponseEntryEntity{Type: c.Type, Name: c.Name})
		}
		e, msg := entityOf(en.Entity)
		keys := map[string]bool{}
		for _, op := range en.Ops {
			switch {
			case msg != "":
			case keys[op.Key]:
				msg = op.Key + " is given twice"
			case op.Remove:
				if m := checkQuotaValue(op.Key, 1); m != "" {
					msg = m
				}
			default:
				msg = checkQuotaValue(op.Key, op.Value)
			}
			keys[op.Key] = true
		}
		if msg != "" {
			re.ErrorCode, re.ErrorMessage = errInvalidRequest, kmsg.StringPtr(msg)
			resp.Entries = append(resp.Entries, re)
			continue
		}
		if !req.ValidateOnly {
			vs := next[e]
			if vs == nil {
				vs = map[string]float64{}
			}
			for _, op := range en.Ops {
				if op.Remove {
					delete(vs, op.Key)
				} else {
					vs[op.Key] = op.Value
				}
				changed = true
			}
			if len(vs) == 0 {
				delete(next, e)
			} else {
				next[e] = vs
			}
		}
		resp.Entries = append(resp.Entries, re)
	}
	if !changed {
		return resp
	}
	if err := q.write(next); err != nil {
		s.log.Error("kafka: AlterClientQuotas: the quotas could not be written", "err", err)
		for i := range resp.Entries {
			if resp.Entries[i].ErrorCode == errNone {
				resp.Entries[i].ErrorCode, resp.Entries[i].ErrorMessage = errUnknownServer, kmsg.StringPtr("the quotas could not be written: "+err.Error())
			}
		}
		return resp
	}
	q.mu.Lock()
	q.quotas = next
	clear(q.meters)
	q.active.Store(len(next) > 0)
	q.mu.Unlock()
	return resp
}

// quotaUser is the user quotas see for a connection.
func quotaUser(a *connAuth) string {
	if a.user != "" {
		return a.user
	}
	return anonymousUser
}

// producedBytes is what a Produce request charges (its record batches).
func producedBytes(req *request) int {
	b, ok := req.body.(*kmsg.ProduceRequest)
	if !ok {
		return 0
	}
	n := 0
	for _, t := range b.Topics {
		for _, p := range t.Partitions {
			n += len(p.Records)
		}
	}
	return n
}

// throttle charges req's bytes (produced: counted before it was served)
// and returns how long to mute the connection and whether after the
// response (else before it); it sets the response's throttle_time_ms.
func (s *Server) throttle(a *connAuth, req *request, produced int, resp kmsg.Response) (time.Duration, bool) {
	if !s.quotas.active.Load() {
		return 0, false
	}
	var d time.Duration
	switch r := resp.(type) {
	case *kmsg.FetchResponse:
		n := 0
		for _, t := range r.Topics {
			for _, p := range t.Partitions {
				n += len(p.RecordBatches)
			}
		}
		d = s.quotas.charge(quotaFetch, quotaUser(a), req.clientID, n, time.Now())
	default:
		if produced == 0 {
			return 0, false
		}
		d = s.quotas.charge(quotaProduce, quotaUser(a), req.clientID, produced, time.Now())
	}
	if d <= 0 {
		return 0, false
	}
	if resp == nil {
		return d, true // acks=0: no response; muted alike
	}
	tr, ok := resp.(kmsg.ThrottleResponse)
	if !ok {
		return d, false
	}
	ms := int32(min(d.Milliseconds()+1, math.MaxInt32))
	if sr, ok := resp.(kmsg.SetThrottleResponse); ok && resp.GetVersion() >= 1 {
		sr.SetThrottle(ms)
	}
	_, after := tr.Throttle()
	return d, after
}

// pause mutes a connection for d; false if the server closed meanwhile.
func (s *Server) pause(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-s.ctx.Done():
		return false
	}
}

// quotaDenied answers a quota request of an account that is not an
// admin; nil for other requests.
func quotaDenied(body kmsg.Request, msg *string) kmsg.Response {
	switch b := body.(type) {
	case *kmsg.DescribeClientQuotasRequest:
		r := b.ResponseKind().(*kmsg.DescribeClientQuotasResponse)
		r.ErrorCode, r.ErrorMessage = errClusterAuthorization, msg
		return r
	case *kmsg.AlterClientQuotasRequest:
		r := b.ResponseKind().(*kmsg.AlterClientQuotasResponse)
		for _, en := range b.Entries {
			re := kmsg.NewAlterClientQuotasResponseEntry()
			re.ErrorCode, re.ErrorMessage = errClusterAuthorization, msg
			for _, c := range en.Entity {
				re.Entity = append(re.Entity, kmsg.AlterClientQuotasResponseEntryEntity{Type: c.Type, Name: c.Name})
			}
			r.Entries = append(r.Entries, re)
		}
		return r
	}
	return nil
}
