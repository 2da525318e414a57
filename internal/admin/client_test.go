package admin

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/acl"
	"github.com/keelmq/keel/internal/remoting"
)

// fakeServer answers every request with code and records the requests.
type fakeServer struct {
	mu   sync.Mutex
	reqs []*remoting.Command
	addr string
}

func startFake(t *testing.T, code int16, remark string) *fakeServer {
	t.Helper()
	f := &fakeServer{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := remoting.NewServer(remoting.ServerConfig{}, remoting.HandlerFunc(
		func(ctx context.Context, c *remoting.Conn, req *remoting.Command) *remoting.Command {
			f.mu.Lock()
			f.reqs = append(f.reqs, req)
			f.mu.Unlock()
			return req.NewResponse(code, remark)
		}))
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Shutdown(context.Background()) })
	f.addr = ln.Addr().String()
	return f
}

func TestRequestsAreSignedWithCredentials(t *testing.T) {
	f := startFake(t, remoting.ResSuccess, "")
	c := New(Config{NamesrvAddrs: []string{f.addr}, AccessKey: "ops", SecretKey: "s3cret", Timeout: 5 * time.Second})
	defer c.Close()
	if _, err := c.invoke(context.Background(), f.addr, remoting.ReqGetAllTopicConfig, map[string]string{"topic": "T"}, nil); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	req := f.reqs[0]
	f.mu.Unlock()
	sig := req.ExtFields[acl.KeySignature]
	if req.ExtFields[acl.KeyAccessKey] != "ops" || sig == "" {
		t.Fatalf("ext %v", req.ExtFields)
	}
	ext := map[string]string{"topic": "T", acl.KeyAccessKey: "ops"}
	if want := acl.Sign("s3cret", ext, nil); sig != want {
		t.Errorf("signature %q, want %q", sig, want)
	}
}

func TestErrorsCarryTheAnswer(t *testing.T) {
	f := startFake(t, remoting.ResTopicNotExist, "topic[X] not exist")
	c := New(Config{NamesrvAddrs: []string{f.addr}, Timeout: 5 * time.Second})
	defer c.Close()
	_, err := c.invoke(context.Background(), f.addr, remoting.ReqGetTopicStatsInfo, map[string]string{"topic": "X"}, nil)
	var re *Error
	if !errors.As(err, &re) || re.Code != remoting.ResTopicNotExist || !errors.Is(err, ErrNotFound) {
		t.Fatalf("err %v", err)
	}
	if got := err.Error(); got != "admin: GET_TOPIC_STATS_INFO from "+f.addr+": TOPIC_NOT_EXIST (17): topic[X] not exist" {
		t.Errorf("message %q", got)
	}
	// A NameServer that answers with an error is not retried elsewhere;
	// unreachable ones are skipped.
	c2 := New(Config{NamesrvAddrs: []string{"127.0.0.1:1", f.addr}, Timeout: 2 * time.Second})
	defer c2.Close()
	if _, err := c2.Brokers(context.Background()); !errors.As(err, &re) {
		t.Errorf("Brokers: %v", err)
	}
}
