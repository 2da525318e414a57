package console

import (
	"embed"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/keelmq/keel/internal/admin"
)

//go:embed static
var staticFiles embed.FS

// Defaults.
const (
	DefaultSampleInterval = 10 * time.Second
	DefaultHistoryPoints  = 360 // an hour at the default interval
	MaxRequestBodyBytes   = 64 << 10
	DefaultBrowseLimit    = 50 // messages a browse by time lists
)

// LocalStats describes the store of the process serving the console.
type LocalStats struct {
	DiskTotalBytes uint64 `json:"diskTotalBytes"`
	DiskFreeBytes  uint64 `json:"diskFreeBytes"`
	CommitLogBytes int64  `json:"commitLogBytes"`
	Writable       bool   `json:"writable"`
}

// Config configures the console.
type Config struct {
	Admin *admin.Client // required
	// Write enables the actions (create topic, resend dead letters).
	Write bool
	// Local, if set, reports this process's store (disk use) for the
	// overview.
	Local          func() LocalStats
	SampleInterval time.Duration // DefaultSampleInterval
	HistoryPoints  int           // DefaultHistoryPoints
	Version        string
	// Elections, if set (a broker in controller mode), reads every
	// group's election history from the controllers (elections.go).
	Elections ElectionsFunc
	Logger    *slog.Logger
	Now       func() time.Time
}

// Console serves the web console. Create it with New.
type Console struct {
	cfg  Config
	log  *slog.Logger
	hist *history
	mux  *http.ServeMux
}

// New builds the console; Run starts its sampler.
func New(cfg Config) *Console {
	if cfg.SampleInterval <= 0 {
		cfg.SampleInterval = DefaultSampleInterval
	}
	if cfg.HistoryPoints <= 1 {
		cfg.HistoryPoints = DefaultHistoryPoints
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	c := &Console{cfg: cfg, log: cfg.Logger, hist: &history{max: cfg.HistoryPoints}, mux: http.NewServeMux()}
	c.routes()
	return c
}

// Handler serves the console's pages under / and its API under /api/.
func (c *Console) Handler() http.Handler { return c.withSlaveReads(c.mux) }

// SlaveReadsHeader is the header of an API answer read (in part) from
// slaves because their group's master is missing: one line per group
// (admin.SlaveRead), separated by " | ". The pages show it above
// themselves.
const SlaveReadsHeader = "X-Keel-Slave-Reads"

// withSlaveReads adds SlaveReadsHeader to the API's answers while the
// admin client reads some broker group from its slave.
func (c *Console) withSlaveReads(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasPrefix(r.URL.Path, "/api/") {
			h.ServeHTTP(w, r)
			return
		}
		h.ServeHTTP(&slaveReadsWriter{ResponseWriter: w, admin: c.cfg.Admin}, r)
	})
}

// slaveReadsWriter sets SlaveReadsHeader when the answer's header is
// written, after the handler's admin calls.
type slaveReadsWriter struct {
	http.ResponseWriter
	admin   *admin.Client
	written bool
}

func (w *slaveReadsWriter) WriteHeader(status int) {
	if !w.written {
		w.written = true
		var lines []string
		for _, sr := range w.admin.SlaveReads() {
			lines = append(lines, strings.NewReplacer("\r", " ", "\n", " ", "|", "/").Replace(sr.String()))
		}
		if len(lines) > 0 {
			w.Header().Set(SlaveReadsHeader, strings.Join(lines, " | "))
		}
	}
	w.ResponseWriter.WriteHeader(status)
}

func (w *slaveReadsWriter) Write(b []byte) (int, error) {
	if !w.written {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(b)
}

func (c *Console) routes() {
	static, err := fs.Sub(staticFiles, "static")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	files := http.FileServerFS(static)
	c.mux.Handle("GET /", noCache(files))
	c.mux.HandleFunc("GET /api/info", c.apiInfo)
	c.mux.HandleFunc("GET /api/overview", c.apiOverview)
	c.mux.HandleFunc("GET /api/topics", c.apiTopics)
	c.mux.HandleFunc("GET /api/topics/{topic}", c.apiTopic)
	c.mux.HandleFunc("GET /api/topics/{topic}/messages", c.apiBrowse)
	c.mux.HandleFunc("POST /api/topics", c.writeAction(c.apiCreateTopic))
	c.mux.HandleFunc("GET /api/groups", c.apiGroups)
	c.mux.HandleFunc("GET /api/groups/{group}", c.apiGroup)
	c.mux.HandleFunc("GET /api/messages", c.apiMessages)
	c.mux.HandleFunc("GET /api/dlq/{group}", c.apiDLQ)
	c.mux.HandleFunc("POST /api/dlq/{group}/resend", c.writeAction(c.apiResend))
	c.mux.HandleFunc("GET /api/transactions", c.apiTransactions)
	c.mux.HandleFunc("GET /api/corrupt", c.apiCorrupt)         // corrupt.go
	c.mux.HandleFunc("GET /api/replication", c.apiReplication) // replication.go
	c.mux.HandleFunc("GET /api/elections", c.apiElections)     // elections.go
	c.mux.HandleFunc("GET /api/amqp", c.apiAMQP)               // amqp.go
	c.mux.HandleFunc("GET /api/kafka", c.apiKafka)             // kafka.go
	c.mux.HandleFunc("GET /api/kafka/groups/{group}", c.apiKafkaGroup)
	unknown := func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "no such API endpoint: "+r.Method+" "+r.URL.Path)
	}
	c.mux.HandleFunc("GET /api/", unknown)
	c.mux.HandleFunc("POST /api/", unknown)
}

// noCache keeps browsers from running a stale console after an upgrade.
func noCache(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-cache")
		h.ServeHTTP(w, r)
	})
}

func atoi(s string) int64 {
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}
