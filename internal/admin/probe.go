package admin

import (
	"context"
	"errors"
	"fmt"

	"github.com/keelmq/keel/internal/remoting"
)

// ErrNotNamesrv is wrapped by the error for an address given as a
// NameServer that answers as something else.
var ErrNotNamesrv = errors.New("admin: not a NameServer")

// NotNamesrvError says what answered at an address given as a NameServer.
type NotNamesrvError struct {
	Addr  string
	Looks string // "a broker", "an HTTP server", ...
	Err   error  // what the exchange failed with
}

func (e *NotNamesrvError) Error() string {
	return fmt.Sprintf("admin: %s is not a NameServer (it looks like %s); a NameServer listens on port 9876 by default", e.Addr, e.Looks)
}

func (e *NotNamesrvError) Unwrap() []error { return []error{ErrNotNamesrv, e.Err} }

// notNamesrv recognises, from how a NameServer request to addr failed, a
// peer that is something else: an HTTP server answers in HTTP (Keel's own
// HTTP listener answers a remoting frame at once, see cmd/keel), and a
// broker refuses NameServer request codes as unsupported but answers
// GET_BROKER_RUNTIME_INFO. It returns nil when err says nothing of the kind.
func (c *Client) notNamesrv(ctx context.Context, addr string, err error) error {
	if errors.Is(err, remoting.ErrHTTPPeer) {
		return &NotNamesrvError{Addr: addr, Looks: "an HTTP server", Err: err}
	}
	var re *Error
	if !errors.As(err, &re) || re.Code != remoting.ResRequestCodeNotSupported {
		return nil
	}
	looks := "a RocketMQ remoting server that is not a NameServer"
	if _, perr := c.invoke(ctx, addr, remoting.ReqGetBrokerRuntimeInfo, nil, nil); perr == nil {
		looks = "a broker"
	}
	return &NotNamesrvError{Addr: addr, Looks: looks, Err: err}
}
