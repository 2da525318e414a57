package acl

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keelmq/keel/internal/remoting"
	"github.com/keelmq/keel/internal/vfs"
)

// DefaultPollInterval is how often the ACL file is checked for changes.
const DefaultPollInterval = 5 * time.Second

// Config configures an Authorizer.
type Config struct {
	// Path is the plain_acl.yml file.
	Path string
	// PollInterval: how often Run re-reads the file. Default
	// DefaultPollInterval.
	PollInterval time.Duration
	// ReadFile reads the file (tests inject failures); nil = os.ReadFile
	// limited to MaxFileBytes.
	ReadFile func(path string) ([]byte, error)
	// FS is where Update rewrites the file; nil = vfs.OS.
	FS     vfs.FS
	Logger *slog.Logger
	// DenyLogsPerSecond bounds Warn lines for denied requests (a client
	// retrying with a wrong key must not flood the log); the rest are
	// counted and the count reported with the next line. Default 20.
	DenyLogsPerSecond int
}

// Authorizer checks requests against the current rules. It is safe for
// concurrent use; Reload (and Run) swap the rules atomically.
type Authorizer struct {
	cfg   Config
	log   *slog.Logger
	rules atomic.Pointer[Rules]

	mu       sync.Mutex // serialises Reload
	loaded   [32]byte   // hash of the content of the current rules
	rejected [32]byte   // hash of the last content that failed to parse
	missing  bool       // the last read failed (logged once)

	denyLog rateLimiter
}

// New loads the file; a missing or invalid file is an error (the broker
// must not start with access control it cannot enforce).
func New(cfg Config) (*Authorizer, error) {
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = DefaultPollInterval
	}
	if cfg.ReadFile == nil {
		cfg.ReadFile = readLimited
	}
	if cfg.DenyLogsPerSecond <= 0 {
		cfg.DenyLogsPerSecond = 20
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	a := &Authorizer{cfg: cfg, log: log, denyLog: rateLimiter{perSecond: cfg.DenyLogsPerSecond}}
	data, err := cfg.ReadFile(cfg.Path)
	if err != nil {
		return nil, fmt.Errorf("acl: read ACL file: %w", err)
	}
	r, err := Parse(cfg.Path, data)
	if err != nil {
		return nil, err
	}
	a.install(r, data)
	return a, nil
}

// NewWithRules makes an Authorizer with fixed rules (no file; Reload and
// Run do nothing).
func NewWithRules(r *Rules, log *slog.Logger) *Authorizer {
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	a := &Authorizer{log: log, denyLog: rateLimiter{perSecond: 20}}
	a.rules.Store(r)
	return a
}

func readLimited(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err == nil && len(data) > MaxFileBytes {
		err = fmt.Errorf("%s is larger than %d bytes", path, MaxFileBytes)
	}
	return data, err
}

func (a *Authorizer) install(r *Rules, data []byte) {
	a.rules.Store(r)
	a.loaded = sha256.Sum256(data)
	a.log.Info("acl: rules loaded", "file", a.cfg.Path, "accounts", len(r.Accounts), "global_white", len(r.GlobalWhite))
	if len(r.Accounts) == 0 && len(r.GlobalWhite) == 0 {
		a.log.Warn("acl: the ACL file has no accounts and no global white list: every request is denied", "file", a.cfg.Path)
	}
}

// Rules returns the rules in force.
func (a *Authorizer) Rules() *Rules { return a.rules.Load() }

// Reload re-reads the file and installs it if its content changed and
// parses. A file that cannot be read or parsed keeps the rules in force
// and is logged (once per distinct failure) at Error. It reports whether
// new rules were installed.
func (a *Authorizer) Reload() (bool, error) {
	if a.cfg.Path == "" {
		return false, nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	data, err := a.cfg.ReadFile(a.cfg.Path)
	if err != nil {
		if !a.missing {
			a.log.Error("acl: cannot read the ACL file; keeping the rules in force", "file", a.cfg.Path, "err", err)
		}
		a.missing = true
		return false, fmt.Errorf("acl: read ACL file: %w", err)
	}
	a.missing = false
	sum := sha256.Sum256(data)
	if sum == a.loaded {
		return false, nil
	}
	r, err := Parse(a.cfg.Path, data)
	if err != nil {
		if sum != a.rejected {
			a.log.Error("acl: the changed ACL file is invalid; keeping the rules in force", "err", err)
		}
		a.rejected = sum
		return false, err
	}
	a.install(r, data)
	return true, nil
}

// Run reloads the file every PollInterval until ctx is done.
func (a *Authorizer) Run(ctx context.Context) {
	if a.cfg.Path == "" {
		return
	}
	t := time.NewTicker(a.cfg.PollInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			a.Reload() // errors are logged by Reload
		}
	}
}

// Denied is the error Check returns for a refused request.
type Denied struct {
	AccessKey string // "" when the request had none
	Code      int16
	Remote    string
	Reason    string
}

func (d *Denied) Error() string {
	if d.AccessKey == "" {
		return "acl: access denied: " + d.Reason
	}
	return fmt.Sprintf("acl: access denied for accessKey=%s: %s", d.AccessKey, d.Reason)
}

// ErrDenied matches every *Denied with errors.Is.
var ErrDenied = errors.New("acl: access denied")

// Is makes errors.Is(err, ErrDenied) true.
func (d *Denied) Is(target error) bool { return target == ErrDenied }

// Check decides whether req from remote may proceed, in RocketMQ's order:
// a global white-listed address passes; otherwise the request must name a
// known AccessKey; an address matching that account's whiteRemoteAddress
// passes without a signature; otherwise the signature must verify and the
// account must hold the permissions the request needs. A denial is logged
// at Warn (never with the secret) and returned as *Denied.
func (a *Authorizer) Check(remote net.Addr, req *remoting.Command) error {
	err := a.check(remoteIP(remote), req)
	if err != nil {
		d := err.(*Denied)
		if remote != nil {
			d.Remote = remote.String()
		}
		if n, ok := a.denyLog.allow(time.Now()); ok {
			a.log.Warn("acl: request denied", "accessKey", d.AccessKey, "code", d.Code,
				"request", remoting.RequestCode(d.Code).String(), "remote", d.Remote, "reason", d.Reason, "suppressed", n)
		}
	}
	return err
}

func (a *Authorizer) check(ip netip.Addr, req *remoting.Command) error {
	r := a.rules.Load()
	for _, p := range r.GlobalWhite {
		if p.match(ip) {
			return nil
		}
	}
	deny := func(ak, format string, args ...any) error {
		return &Denied{AccessKey: ak, Code: req.Code, Reason: fmt.Sprintf(format, args...)}
	}
	ak, ok := req.ExtFields[KeyAccessKey]
	if !ok || ak == "" {
		return deny("", "the request carries no AccessKey (the broker requires ACL credentials)")
	}
	acct := r.Accounts[ak]
	if acct == nil {
		return deny(ak, "unknown accessKey")
	}
	if acct.White.match(ip) {
		return nil
	}
	if _, ok := req.ExtFields[KeySignature]; !ok {
		return deny(ak, "the request carries no Signature")
	}
	if !verifySignature(acct.secretKey, req.ExtFields, req.Body) {
		return deny(ak, "signature mismatch (wrong secretKey, or the request was altered)")
	}
	rs, err := needs(req)
	if err != nil {
		return deny(ak, "cannot determine the resources of %s: %v", remoting.RequestCode(req.Code), err)
	}
	if reason := permitted(acct, req.Code, rs); reason != "" {
		return deny(ak, "%s", reason)
	}
	return nil
}

// permitted checks an authenticated account's permissions (RocketMQ's
// PlainPermissionChecker) and returns why not, or "".
func permitted(acct *Account, code int16, rs []resource) string {
	if adminCodes[code] && !acct.Admin {
		return fmt.Sprintf("%s needs an admin account", remoting.RequestCode(code))
	}
	if len(rs) == 1 && !rs[0].group && rs[0].name == traceTopic && rs[0].perm == Pub {
		return ""
	}
	if acct.Admin && len(acct.TopicPerms) == 0 && len(acct.GroupPerms) == 0 {
		return "" // an admin without resource rules may access everything
	}
	for _, res := range rs {
		owned, listed := acct.TopicPerms[res.name], false
		if res.group {
			owned, listed = acct.GroupPerms[res.name]
		} else {
			_, listed = acct.TopicPerms[res.name]
		}
		if !listed {
			owned = acct.DefaultTopicPerm
			if res.group {
				owned = acct.DefaultGroupPerm
			}
		}
		if !owned.allows(res.perm) {
			how := "rule"
			if !listed {
				how = "default"
			}
			return fmt.Sprintf("no %s permission on %s (%s permission %s)", res.perm, res, how, owned)
		}
	}
	return ""
}

// rateLimiter allows perSecond events per wall-clock second and counts
// the rest.
type rateLimiter struct {
	perSecond int
	mu        sync.Mutex
	second    int64
	used      int
	dropped   int
}

// allow reports whether to log now and how many were suppressed since the
// last allowed event.
func (l *rateLimiter) allow(now time.Time) (suppressed int, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if s := now.Unix(); s != l.second {
		l.second, l.used = s, 0
	}
	if l.used >= l.perSecond {
		l.dropped++
		return 0, false
	}
	l.used++
	suppressed, l.dropped = l.dropped, 0
	return suppressed, true
}

// Wrap returns a handler that checks every request with a before passing
// it to h. A denied request gets NO_PERMISSION (16) with the reason as
// remark (no response for a request flagged oneway). A nil a returns h.
func Wrap(h remoting.Handler, a *Authorizer) remoting.Handler {
	if a == nil {
		return h
	}
	return checked{h: h, a: a}
}

// checked is a handler behind the authorizer. Check only reads a request
// (its signature covers the body), so it borrows a request body exactly
// when h does (remoting.BodyBorrower).
type checked struct {
	h remoting.Handler
	a *Authorizer
}

func (w checked) Handle(ctx context.Context, c *remoting.Conn, req *remoting.Command) *remoting.Command {
	var remote net.Addr
	if c != nil {
		remote = c.RemoteAddr()
	}
	if err := w.a.Check(remote, req); err != nil {
		if req.IsOneway() {
			return nil
		}
		return req.NewResponse(remoting.ResNoPermission, err.Error())
	}
	return w.h.Handle(ctx, c, req)
}

func (w checked) BorrowsBody(code int16) bool { return remoting.BorrowsBody(w.h, code) }
