package broker

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/core"
	"github.com/keelmq/keel/internal/remoting"
)

// fakeNamesrv records REGISTER_BROKER / UNREGISTER_BROKER requests.
type fakeNamesrv struct {
	mu   sync.Mutex
	regs []*remoting.Command
	srv  *remoting.Server
	addr string
	// hold, when set, is waited on before a registration is recorded and
	// answered (a slow NameServer).
	hold chan struct{}
}

func startFakeNamesrv(t *testing.T) *fakeNamesrv {
	f := &fakeNamesrv{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f.srv = remoting.NewServer(remoting.ServerConfig{}, remoting.HandlerFunc(
		func(ctx context.Context, c *remoting.Conn, req *remoting.Command) *remoting.Command {
			f.mu.Lock()
			hold := f.hold
			f.mu.Unlock()
			if hold != nil && req.Code == remoting.ReqRegisterBroker {
				select {
				case <-hold:
				case <-ctx.Done():
					return nil
				}
			}
			f.mu.Lock()
			f.regs = append(f.regs, req)
			f.mu.Unlock()
			return req.NewResponse(0, "")
		}))
	go f.srv.Serve(ln)
	f.addr = ln.Addr().String()
	t.Cleanup(func() { f.srv.Shutdown(context.Background()) })
	return f
}

// topicsOfLast returns the topics of the last registration and the count of requests with code.
func (f *fakeNamesrv) last(code int16) (*remoting.Command, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var last *remoting.Command
	n := 0
	for _, r := range f.regs {
		if r.Code == code {
			last, n = r, n+1
		}
	}
	return last, n
}

func registeredTopics(t *testing.T, req *remoting.Command) map[string]TopicConfig {
	var body registerBody
	if err := json.Unmarshal(req.Body, &body); err != nil {
		t.Fatal(err)
	}
	return body.TopicConfigSerializeWrapper.TopicConfigTable
}

func TestRegistersAtStartAndOnTopicCreation(t *testing.T) {
	ns := startFakeNamesrv(t)
	e := startEnv(t, func(c *Config) { c.NamesrvAddrs = []string{ns.addr} })
	waitFor(t, "first registration", func() bool { _, n := ns.last(remoting.ReqRegisterBroker); return n >= 1 })
	req, _ := ns.last(remoting.ReqRegisterBroker)
	for _, k := range []string{"brokerName", "brokerAddr", "clusterName", "brokerId", "bodyCrc32"} {
		if req.ExtFields[k] == "" {
			t.Errorf("registration lacks %s", k)
		}
	}
	if req.ExtFields["brokerAddr"] != e.addr {
		t.Errorf("brokerAddr %s, want %s", req.ExtFields["brokerAddr"], e.addr)
	}
	if tc, ok := registeredTopics(t, req)[DefaultTopic]; !ok || tc.Perm != 7 {
		t.Fatalf("TBW102 registration %+v", tc)
	}
	wantCode(t, e.dial().sendV1("NewTopic", 0, "", []byte("x")), remoting.ResSuccess)
	waitFor(t, "registration of the new topic", func() bool {
		req, _ := ns.last(remoting.ReqRegisterBroker)
		_, ok := registeredTopics(t, req)["NewTopic"]
		return ok
	})
	e.shutdown()
	if _, n := ns.last(remoting.ReqUnregisterBroker); n != 1 {
		t.Fatalf("unregistrations %d", n)
	}
}

// UPDATE_AND_CREATE_TOPIC answers once a registration holding the new
// topic has been answered by the NameServer, so a client that asks the
// NameServer for its route right after (a consumer started once
// `keel topic create` returned) finds it; a NameServer that does not
// answer delays the create by RegisterTimeout at most and fails nothing.
func TestCreateTopicAnswersAfterRegistration(t *testing.T) {
	ns := startFakeNamesrv(t)
	e := startEnv(t, func(c *Config) { c.NamesrvAddrs = []string{ns.addr}; c.RegisterTimeout = 2 * time.Second })
	waitFor(t, "first registration", func() bool { _, n := ns.last(remoting.ReqRegisterBroker); return n >= 1 })
	hold := make(chan struct{})
	ns.mu.Lock()
	ns.hold = hold
	ns.mu.Unlock()
	cl := e.dial()
	created := make(chan *remoting.Command, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		resp, err := cl.c.Invoke(ctx, remoting.NewRequest(remoting.ReqUpdateAndCreateTopic,
			map[string]string{"topic": "Announced", "readQueueNums": "2", "writeQueueNums": "2"}, nil))
		if err != nil {
			resp = &remoting.Command{Code: -1, Remark: err.Error()}
		}
		created <- resp
	}()
	// The registration is held: the create must not answer yet.
	select {
	case resp := <-created:
		t.Fatalf("the create answered (%d %s) before the NameServer had the topic", resp.Code, resp.Remark)
	case <-time.After(300 * time.Millisecond):
	}
	close(hold)
	resp := <-created
	wantCode(t, resp, remoting.ResSuccess)
	req, _ := ns.last(remoting.ReqRegisterBroker)
	if _, ok := registeredTopics(t, req)["Announced"]; !ok {
		t.Fatalf("the create answered before a registration holding its topic was answered")
	}

	// A NameServer that never answers: the create succeeds after about
	// RegisterTimeout.
	ns.mu.Lock()
	ns.hold = make(chan struct{})
	ns.mu.Unlock()
	start := time.Now()
	wantCode(t, cl.invoke(remoting.ReqUpdateAndCreateTopic,
		map[string]string{"topic": "Unannounced", "readQueueNums": "1", "writeQueueNums": "1"}, nil), remoting.ResSuccess)
	if took := time.Since(start); took > 8*time.Second {
		t.Fatalf("the create took %v with a NameServer that does not answer", took)
	}
	if _, ok := e.b.core.Topic("Unannounced"); !ok {
		t.Fatal("the topic was not created")
	}
}

func TestReadOnlyBrokerRegistersReadOnlyTopics(t *testing.T) {
	ns := startFakeNamesrv(t)
	startEnv(t, func(c *Config) { c.NamesrvAddrs = []string{ns.addr}; c.BrokerPermission = core.PermRead })
	waitFor(t, "registration", func() bool { _, n := ns.last(remoting.ReqRegisterBroker); return n >= 1 })
	req, _ := ns.last(remoting.ReqRegisterBroker)
	for name, tc := range registeredTopics(t, req) {
		if tc.Perm&core.PermWrite != 0 {
			t.Errorf("%s registered writable (perm %d) by a read-only broker", name, tc.Perm)
		}
	}
}

// A burst of topic creations is announced in rounds about registerGap
// apart (the first registerBurst at once), the last of which holds every
// topic: not one round of the whole table per creation.
func TestRegistrationCoalescesABurstOfCreations(t *testing.T) {
	ns := startFakeNamesrv(t)
	e := startEnv(t, func(c *Config) { c.NamesrvAddrs = []string{ns.addr} })
	waitFor(t, "first registration", func() bool { _, n := ns.last(remoting.ReqRegisterBroker); return n >= 1 })
	_, before := ns.last(remoting.ReqRegisterBroker)
	start := time.Now()
	const topics = 200
	for i := range topics {
		if _, err := e.b.EnsureTopic(fmt.Sprintf("Burst%d", i), 1, core.PermRW); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "registration of every topic", func() bool {
		req, _ := ns.last(remoting.ReqRegisterBroker)
		return len(registeredTopics(t, req)) >= topics
	})
	_, after := ns.last(remoting.ReqRegisterBroker)
	// registerBurst rounds at once, then one per registerGap at most (and
	// perhaps one periodic round).
	limit := int(time.Since(start)/registerGap) + registerBurst + 1
	if rounds := after - before; rounds > limit {
		t.Fatalf("%d registrations for %d creations in %v, want at most %d", rounds, topics, time.Since(start), limit)
	}
}

func TestKickLimiter(t *testing.T) {
	var k kickLimiter
	now := time.Unix(1000, 0)
	for i := range registerBurst {
		if w := k.wait(now); w != 0 {
			t.Fatalf("round %d of a short run waits %v", i, w)
		}
		k.started(now)
	}
	// Then one round per registerGap.
	for i := range 10 {
		w := k.wait(now)
		if w != registerGap {
			t.Fatalf("round %d of a burst waits %v, want %v", registerBurst+i, w, registerGap)
		}
		now = now.Add(w)
		k.started(now)
	}
	// A quiet spell refills the bucket.
	now = now.Add(registerBurst * registerGap)
	for i := range registerBurst {
		if w := k.wait(now); w != 0 {
			t.Fatalf("round %d after a quiet spell waits %v", i, w)
		}
		k.started(now)
	}
	if w := k.wait(now); w != registerGap {
		t.Fatalf("round %d after a quiet spell waits %v, want %v", registerBurst, w, registerGap)
	}
}

// TestRegistrationCarriesMasterEpoch: a master in controller mode
// registers its epoch as masterEpoch; without one, the field is absent.
func TestRegistrationCarriesMasterEpoch(t *testing.T) {
	for _, epoch := range []uint32{0, 7} {
		ns := startFakeNamesrv(t)
		e := startEnv(t, func(c *Config) { c.NamesrvAddrs, c.MasterEpoch = []string{ns.addr}, epoch })
		waitFor(t, "first registration", func() bool { _, n := ns.last(remoting.ReqRegisterBroker); return n >= 1 })
		req, _ := ns.last(remoting.ReqRegisterBroker)
		got, ok := req.ExtFields["masterEpoch"]
		if epoch == 0 && ok || epoch != 0 && got != fmt.Sprint(epoch) {
			t.Errorf("epoch %d: masterEpoch %q (present %v)", epoch, got, ok)
		}
		e.shutdown()
	}
}
