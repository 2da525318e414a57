package amqpmgmt

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"

	"github.com/keelmq/keel/internal/amqpinfo"
)

// CompatVersion is the RabbitMQ release whose management API shapes are
// served; /api/overview gives it as rabbitmq_version and
// management_version (tools pick their requests by it).
const CompatVersion = "3.10.8"

// Source gives the snapshots the API serves; internal/amqp's Server is
// one.
type Source interface {
	Queues() []amqpinfo.Queue
	Exchanges() []amqpinfo.Exchange
	Bindings() []amqpinfo.Binding
	ConnectionDetails() []amqpinfo.ConnectionDetail
	Channels() []amqpinfo.Channel
	Consumers() []amqpinfo.Consumer
	VhostNames() []string
	// QueueArguments and ExchangeArguments return an object's
	// arguments as JSON values (nil: none).
	QueueArguments(vhost, name string) map[string]any
	ExchangeArguments(vhost, name string) map[string]any
	// ForceClose closes the open connection named name with 320
	// CONNECTION_FORCED and reason; false if there is none.
	ForceClose(name, reason string) bool
}

// Listener is one AMQP listener, for /api/overview.
type Listener struct {
	Protocol string // "amqp" or "amqp/ssl"
	Addr     net.Addr
}

// Config is what the API serves and whom it lets in.
type Config struct {
	Source Source
	// Login checks a request's HTTP Basic credentials from remote; only
	// a true answer lets the request through.
	Login func(user, pass string, remote net.Addr) bool
	// Node is the name given as every object's node (and cluster_name).
	Node string
	// Version is Keel's version (product_version).
	Version   string
	Listeners []Listener
	// Cluster, if set, gives the queues of the cluster's other broker
	// groups (cluster.go); nil: this member's own only.
	Cluster Cluster
	// Log receives refused logins at Warn (never the password); nil: none.
	Log *slog.Logger
}

// Realm is the HTTP Basic realm of the 401 challenge.
const Realm = "Keel AMQP management"

// Handler returns the API's handler.
func Handler(cfg Config) http.Handler {
	a := &api{cfg: cfg}
	a.routes = map[string]route{
		"overview":    {a.overview, 0},
		"whoami":      {a.whoami, 0},
		"vhosts":      {a.vhosts, 1},
		"queues":      {a.queues, 2},
		"exchanges":   {a.exchanges, 2},
		"bindings":    {a.bindings, 1},
		"connections": {a.connections, 1},
		"channels":    {a.channels, 1},
		"consumers":   {a.consumers, 1},
		"nodes":       {a.nodes, 1},
	}
	return a
}

// route is one endpoint: /api/<key>/<arg>..., with up to maxArgs path
// arguments (a vhost, then a name; or a connection or channel name).
type route struct {
	fn      func(request) (any, error)
	maxArgs int
}

type api struct {
	cfg    Config
	routes map[string]route
}

// request is what a route's function gets: the path's arguments
// (unescaped), the logged-in user.
type request struct {
	*http.Request
	user string
	args []string
}

// arg returns the path's ith argument, "" if absent.
func (r request) arg(i int) string {
	if i < len(r.args) {
		return r.args[i]
	}
	return ""
}

// serve routes by the escaped path's segments, each unescaped on its
// own: a vhost or name may hold "/" as %2F.
func (a *api) serve(w http.ResponseWriter, r *http.Request) {
	segs := strings.Split(strings.TrimPrefix(r.URL.EscapedPath(), "/"), "/")
	if len(segs) > 2 && segs[len(segs)-1] == "" {
		segs = segs[:len(segs)-1] // a trailing slash
	}
	if len(segs) < 2 || segs[0] != "api" {
		notFound(w)
		return
	}
	rt, ok := a.routes[segs[1]]
	args := segs[2:]
	if !ok || len(args) > rt.maxArgs {
		notFound(w)
		return
	}
	for i, s := range args {
		u, err := url.PathUnescape(s)
		if err != nil || u == "" {
			notFound(w)
			return
		}
		args[i] = u
	}
	user, _, _ := r.BasicAuth()
	v, err := rt.fn(request{r, user, args})
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

// ServeHTTP checks the credentials, then the method, then routes.
func (a *api) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	user, pass, ok := r.BasicAuth()
	if !ok || a.cfg.Login == nil || !a.cfg.Login(user, pass, remoteAddr(r.RemoteAddr)) {
		if a.cfg.Log != nil {
			a.cfg.Log.Warn("amqp management: login refused", "remote", r.RemoteAddr, "user", user, "method", r.Method, "path", r.URL.Path)
		}
		w.Header().Set("WWW-Authenticate", `Basic realm="`+Realm+`"`)
		writeJSON(w, http.StatusUnauthorized, errorBody{"not_authorized", "Login failed"})
		return
	}
	if r.Method == http.MethodDelete {
		a.delete(w, r)
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		writeJSON(w, http.StatusMethodNotAllowed, errorBody{"method_not_allowed",
			"this management API changes nothing but the connections it closes: only GET, HEAD and DELETE /api/connections/{name} are served"})
		return
	}
	a.serve(w, r)
}

// closeReason is RabbitMQ's default reason for a connection closed
// through its management API; the X-Reason header gives another.
const closeReason = "Closed via management plugin"

// delete serves DELETE /api/connections/{name}, RabbitMQ's way to close a
// client's connection: 204 once the close is under way, 404 when no such
// connection is open. Every other DELETE is 405.
func (a *api) delete(w http.ResponseWriter, r *http.Request) {
	segs := strings.Split(strings.TrimPrefix(r.URL.EscapedPath(), "/"), "/")
	if len(segs) != 3 || segs[0] != "api" || segs[1] != "connections" {
		w.Header().Set("Allow", "GET, HEAD")
		writeJSON(w, http.StatusMethodNotAllowed, errorBody{"method_not_allowed",
			"only connections can be deleted (closed) through this management API"})
		return
	}
	name, err := url.PathUnescape(segs[2])
	if err != nil || name == "" {
		notFound(w)
		return
	}
	reason := r.Header.Get("X-Reason")
	if reason == "" {
		reason = closeReason
	}
	if len(reason) > 200 {
		reason = reason[:200] // the close's reply text is a short string
	}
	if !a.cfg.Source.ForceClose(name, reason) {
		notFound(w)
		return
	}
	user, _, _ := r.BasicAuth()
	if a.cfg.Log != nil {
		a.cfg.Log.Info("amqp management: connection closed", "connection", name, "by", user, "remote", r.RemoteAddr)
	}
	w.WriteHeader(http.StatusNoContent)
}

// remoteAddr parses a request's RemoteAddr; nil if it is not host:port.
func remoteAddr(s string) net.Addr {
	ap, err := netip.ParseAddrPort(s)
	if err != nil {
		return nil
	}
	return net.TCPAddrFromAddrPort(ap)
}

// errorBody is RabbitMQ's error document.
type errorBody struct {
	Error  string `json:"error"`
	Reason string `json:"reason"`
}

// apiError is an error answer.
type apiError struct {
	status int
	body   errorBody
}

func (e *apiError) Error() string { return e.body.Reason }

func badRequest(reason string) error {
	return &apiError{http.StatusBadRequest, errorBody{"bad_request", reason}}
}

var errNotFound = &apiError{http.StatusNotFound, errorBody{"Object Not Found", "Not Found"}}

func notFound(w http.ResponseWriter) { writeError(w, errNotFound) }

func writeError(w http.ResponseWriter, err error) {
	e, ok := err.(*apiError)
	if !ok {
		e = &apiError{http.StatusInternalServerError, errorBody{"internal_error", err.Error()}}
	}
	writeJSON(w, e.status, e.body)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // connection names hold "->" as RabbitMQ writes them
	err := enc.Encode(v)
	b := buf.Bytes()
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":"internal_error","reason":"encoding the answer failed"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(status)
	w.Write(b)
}
