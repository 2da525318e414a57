package admin

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/keelmq/keel/internal/acl"
	"github.com/keelmq/keel/internal/remoting"
)

// Defaults.
const (
	DefaultNamesrv = "127.0.0.1:9876"
	DefaultTimeout = 10 * time.Second
)

// Groups the tools use on the brokers.
const (
	// ToolsGroup pulls for `msg tail` and `dlq list` (RocketMQ's
	// TOOLS_CONSUMER); it never commits offsets.
	ToolsGroup = "TOOLS_CONSUMER"
	// ToolsProducerGroup names the producer of `msg send` and DLQ resends.
	ToolsProducerGroup = "TOOLS_PRODUCER"
	// ResendGroup holds the DLQ resend cursors as consumer offsets on
	// %DLQ%<group>. It is never a subscription group.
	ResendGroup = "KEEL_DLQ_RESEND"
)

// ErrNotFound is wrapped by errors for a topic, group or message that does
// not exist.
var ErrNotFound = errors.New("admin: not found")

// Error is a non-success response from a NameServer or broker.
type Error struct {
	Addr    string // who answered
	Request int16
	Code    int16
	Remark  string
}

func (e *Error) Error() string {
	return fmt.Sprintf("admin: %s from %s: %s (%d): %s", remoting.RequestCode(e.Request),
		e.Addr, remoting.ResponseCode(e.Code), e.Code, e.Remark)
}

// Is makes a TOPIC_NOT_EXIST / QUERY_NOT_FOUND / group-not-found answer
// match ErrNotFound.
func (e *Error) Is(target error) bool {
	if target != ErrNotFound {
		return false
	}
	switch e.Code {
	case remoting.ResTopicNotExist, remoting.ResQueryNotFound, remoting.ResSubscriptionGroupNotExist,
		remoting.ResConsumerNotOnline:
		return true
	}
	return false
}

// Config configures a Client.
type Config struct {
	NamesrvAddrs []string      // tried in order; default DefaultNamesrv
	Timeout      time.Duration // per request; default DefaultTimeout
	// AccessKey and SecretKey sign every request (RocketMQ ACL) when
	// AccessKey is set; admin requests need an admin account.
	AccessKey, SecretKey string
	// TLS, if set, dials every NameServer and broker with TLS.
	TLS *tls.Config
	// BrokerTLS, if set, dials the brokers (every address but
	// NamesrvAddrs) with it instead of TLS.
	BrokerTLS *tls.Config
	Logger    *slog.Logger
	// OnSlaveRead, if set, is told of each broker group read from its
	// slave because its master is missing (ReadBrokers), once per group
	// and slave while the master stays missing.
	OnSlaveRead func(SlaveRead)
}

// Client is an admin client. Close it when done.
type Client struct {
	cfg Config
	log *slog.Logger

	mu         sync.Mutex
	conns      map[string]*remoting.Client // guarded by mu
	closed     bool                        // guarded by mu
	slaveReads map[string]SlaveRead        // guarded by mu: by group, see ReadBrokers
}

// New returns a client; it connects lazily.
func New(cfg Config) *Client {
	if len(cfg.NamesrvAddrs) == 0 {
		cfg.NamesrvAddrs = []string{DefaultNamesrv}
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return &Client{cfg: cfg, log: cfg.Logger, conns: make(map[string]*remoting.Client)}
}

// Close closes every connection.
func (c *Client) Close() error {
	c.mu.Lock()
	conns := c.conns
	c.conns, c.closed = nil, true
	c.mu.Unlock()
	for _, cl := range conns {
		cl.Close()
	}
	return nil
}

func (c *Client) conn(ctx context.Context, addr string) (*remoting.Client, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, errors.New("admin: client closed")
	}
	if cl := c.conns[addr]; cl != nil {
		select {
		case <-cl.Done():
			delete(c.conns, addr)
		default:
			return cl, nil
		}
	}
	dctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	tc := c.cfg.TLS
	if c.cfg.BrokerTLS != nil && !slices.Contains(c.cfg.NamesrvAddrs, addr) {
		tc = c.cfg.BrokerTLS
	}
	cl, err := remoting.Dial(dctx, addr, remoting.ClientConfig{Logger: c.log, TLS: tc})
	if err != nil {
		return nil, fmt.Errorf("admin: %w", err)
	}
	c.conns[addr] = cl
	return cl, nil
}

// call sends req to addr and returns the response whatever its code.
func (c *Client) call(ctx context.Context, addr string, req *remoting.Command) (*remoting.Command, error) {
	cl, err := c.conn(ctx, addr)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	c.sign(req)
	resp, err := cl.Invoke(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("admin: %s to %s: %w", remoting.RequestCode(req.Code), addr, err)
	}
	return resp, nil
}

// sign adds the ACL signature when the client has credentials.
func (c *Client) sign(req *remoting.Command) {
	if c.cfg.AccessKey != "" {
		acl.SignRequest(req, c.cfg.AccessKey, c.cfg.SecretKey)
	}
}

// invoke is call that turns a non-success code into *Error.
func (c *Client) invoke(ctx context.Context, addr string, code int16, ext map[string]string, body []byte) (*remoting.Command, error) {
	resp, err := c.call(ctx, addr, remoting.NewRequest(code, ext, body))
	if err != nil {
		return nil, err
	}
	if resp.Code != remoting.ResSuccess {
		return nil, &Error{Addr: addr, Request: code, Code: resp.Code, Remark: resp.Remark}
	}
	return resp, nil
}

// invokeNamesrv asks the NameServers in order until one answers.
func (c *Client) invokeNamesrv(ctx context.Context, code int16, ext map[string]string) (*remoting.Command, error) {
	var errs []error
	for _, addr := range c.cfg.NamesrvAddrs {
		resp, err := c.invoke(ctx, addr, code, ext, nil)
		if err == nil {
			return resp, nil
		}
		if nerr := c.notNamesrv(ctx, addr, err); nerr != nil {
			return nil, nerr // a wrong address: say so rather than try the next
		}
		var re *Error
		if errors.As(err, &re) {
			return nil, err // the NameServer answered: no point asking another
		}
		errs = append(errs, err)
	}
	return nil, fmt.Errorf("admin: no NameServer reachable: %w", errors.Join(errs...))
}
