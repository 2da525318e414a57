package broker

// Registration with the NameServers: REGISTER_BROKER (103) with the whole
// topic table every RegisterInterval (30 s) and soon after any topic is
// created or deleted; UNREGISTER_BROKER (104) on Close. A few changes in a
// row are each announced at once; during a burst of changes (creating a
// thousand topics) rounds come one per registerGap, each announcing every
// change made before it started, so a burst of N creations costs a few
// rounds of the whole table instead of N.
//
// The request follows RocketMQ's Java broker: ext brokerName, brokerAddr,
// clusterName, haServerAddr, brokerId, heartbeatTimeoutMillis,
// enableActingMaster, compressed=false, bodyCrc32 (CRC32-IEEE of the body &
// 0x7FFFFFFF); body {"topicConfigSerializeWrapper":{"topicConfigTable":{...},
// "dataVersion":{...}},"filterServerList":[]}. Each NameServer is called
// concurrently with RegisterTimeout; a failed connection is re-dialled on the
// next round. Failures are logged, never fatal: the next round retries.
// An answer naming the master's HA address (haServerAddr, to a slave) is
// passed to Config.OnMasterAddress. SetRegisterExt adds Keel's own fields
// (the Kafka door's address and node id), which RocketMQ NameServers
// ignore; AskNamesrv lets other parts ask the NameServers over the same
// connections.
// A NameServer for which Config.NamesrvTLS gives a TLS configuration is
// dialled over TLS.

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"hash/crc32"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keelmq/keel/internal/core"
	"github.com/keelmq/keel/internal/remoting"
)

type registrar struct {
	b      *Broker
	kickCh chan struct{}
	// lastOK is when a NameServer last accepted a registration (Unix ms,
	// 0: never); readiness checks read it (observe.go).
	lastOK atomic.Int64

	// ext, when set, adds fields to every registration, and answer is told
	// each NameServer's answer (SetRegisterExt).
	ext    atomic.Pointer[func() map[string]string]
	answer atomic.Pointer[func(map[string]string)]

	// more holds the fields of the other doors (AddRegisterExt), by door.
	moreMu sync.Mutex
	more   map[string]func() map[string]string

	mu      sync.Mutex
	clients map[string]*remoting.Client

	// Rounds asked for and done: asked counts kicks; done is the value of
	// asked when the last finished round started (it covers every change
	// kicked before); doneCh is closed, and replaced, when done moves.
	roundMu sync.Mutex
	asked   uint64
	done    uint64
	doneCh  chan struct{}
}

// SetRegisterExt makes every registration from now on carry the fields f
// returns besides RocketMQ's (the Kafka door's: namesrv.KafkaRegistration;
// the NameServers of RocketMQ ignore them), passes the ext fields of each
// NameServer's successful answer to answer (if not nil), and registers
// soon. Neither may block or call into the broker.
func (b *Broker) SetRegisterExt(f func() map[string]string, answer func(ext map[string]string)) {
	if answer != nil {
		b.reg.answer.Store(&answer)
	}
	b.reg.ext.Store(&f)
	b.reg.kick()
}

// AddRegisterExt makes every registration from now on carry the fields f
// returns besides RocketMQ's and SetRegisterExt's, under door's name (a
// second call for door replaces the first; nil removes it), and registers
// soon. f may not block or call into the broker.
func (b *Broker) AddRegisterExt(door string, f func() map[string]string) {
	b.reg.moreMu.Lock()
	if b.reg.more == nil {
		b.reg.more = map[string]func() map[string]string{}
	}
	if f == nil {
		delete(b.reg.more, door)
	} else {
		b.reg.more[door] = f
	}
	b.reg.moreMu.Unlock()
	b.reg.kick()
}

// AskNamesrv calls f with a client of each NameServer in turn until one
// call succeeds, and returns the last error if none did (an error too
// without NameServers).
func (b *Broker) AskNamesrv(ctx context.Context, f func(*remoting.Client) error) error {
	err := errors.New("no NameServer configured")
	for _, addr := range b.cfg.NamesrvAddrs {
		c, cerr := b.reg.client(ctx, addr)
		if cerr != nil {
			err = cerr
			continue
		}
		if err = f(c); err == nil {
			return nil
		}
		select {
		case <-c.Done():
			b.reg.drop(addr, c)
		default:
		}
	}
	return err
}

func newRegistrar(b *Broker) *registrar {
	return &registrar{b: b, kickCh: make(chan struct{}, 1), clients: make(map[string]*remoting.Client), doneCh: make(chan struct{})}
}

// RegisterSoon asks for a registration with the NameServers soon (rate
// limited as after a topic change); it never blocks. A slave that lost
// its master calls it to learn a new master address from the answer.
func (b *Broker) RegisterSoon() { b.reg.kick() }

// kick asks for a registration soon; it never blocks.
func (r *registrar) kick() { r.ask() }

// ask is kick returning the round number that covers the request.
func (r *registrar) ask() uint64 {
	r.roundMu.Lock()
	r.asked++
	n := r.asked
	r.roundMu.Unlock()
	select {
	case r.kickCh <- struct{}{}:
	default:
	}
	return n
}

// covering returns the round number a round starting now covers.
func (r *registrar) covering() uint64 {
	r.roundMu.Lock()
	defer r.roundMu.Unlock()
	return r.asked
}

// finished records that a round covering n ended (answered or not).
func (r *registrar) finished(n uint64) {
	r.roundMu.Lock()
	defer r.roundMu.Unlock()
	if n > r.done {
		r.done = n
		close(r.doneCh)
		r.doneCh = make(chan struct{})
	}
}

// awaitRound asks for a registration round and waits until one covering
// the changes made so far has ended, or ctx ends. It reports whether it did.
func (r *registrar) awaitRound(ctx context.Context) bool {
	n := r.ask()
	for {
		r.roundMu.Lock()
		done, ch := r.done, r.doneCh
		r.roundMu.Unlock()
		if done >= n {
			return true
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return false
		}
	}
}

// Registrations asked for by kick: up to registerBurst in a row go at once
// (a topic, then the group's retry topic, are each announced at once), then
// one per registerGap while a burst of creations lasts.
const (
	registerGap   = 100 * time.Millisecond
	registerBurst = 4
)

// kickLimiter spaces the registrations asked for by kick: a token bucket
// of registerBurst rounds, refilled with one round per registerGap.
type kickLimiter struct {
	tokens float64
	at     time.Time // of the last refill; zero: full
}

func (k *kickLimiter) refill(now time.Time) {
	if k.at.IsZero() {
		k.tokens = registerBurst
	} else {
		k.tokens = min(registerBurst, k.tokens+float64(now.Sub(k.at))/float64(registerGap))
	}
	k.at = now
}

// wait returns how long a round asked for at now must wait.
func (k *kickLimiter) wait(now time.Time) time.Duration {
	k.refill(now)
	if k.tokens >= 1 {
		return 0
	}
	return time.Duration((1 - k.tokens) * float64(registerGap))
}

// started records a round started at now.
func (k *kickLimiter) started(now time.Time) {
	k.refill(now)
	k.tokens = max(0, k.tokens-1)
}

func (r *registrar) run(ctx context.Context) {
	r.round(ctx)
	t := time.NewTicker(r.b.cfg.RegisterInterval)
	defer t.Stop()
	var limit kickLimiter
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-r.kickCh:
			if wait := limit.wait(time.Now()); wait > 0 {
				select {
				case <-ctx.Done():
					return
				case <-time.After(wait):
				}
			}
			limit.started(time.Now())
		}
		// This round covers every change made so far, including those
		// whose kicks arrived while waiting.
		select {
		case <-r.kickCh:
		default:
		}
		r.round(ctx)
	}
}

// round is one registration with every NameServer, covering every
// change asked for before it starts.
func (r *registrar) round(ctx context.Context) {
	n := r.covering()
	r.registerAll(ctx)
	r.finished(n)
}

type registerBody struct {
	TopicConfigSerializeWrapper struct {
		TopicConfigTable map[string]TopicConfig `json:"topicConfigTable"`
		DataVersion      core.DataVersion       `json:"dataVersion"`
	} `json:"topicConfigSerializeWrapper"`
	FilterServerList []string `json:"filterServerList"`
}

func (r *registrar) body() ([]byte, error) {
	var body registerBody
	topics, ver := r.b.core.TopicTable()
	if bp := r.b.cfg.BrokerPermission; bp&core.PermRW != core.PermRW {
		// A broker that is not readable or not writable announces so in
		// every topic's route, so clients stay away (RocketMQ does the same).
		for name, tc := range topics {
			tc.Perm &= bp | core.PermInherit
			topics[name] = tc
		}
	}
	body.TopicConfigSerializeWrapper.TopicConfigTable, body.TopicConfigSerializeWrapper.DataVersion = topics, ver
	body.FilterServerList = []string{}
	return json.Marshal(body)
}

// registerAll registers with every NameServer and waits for the answers.
func (r *registrar) registerAll(ctx context.Context) {
	if len(r.b.cfg.NamesrvAddrs) == 0 {
		return
	}
	body, err := r.body()
	if err != nil {
		r.b.log.Error("encode broker registration", "err", err)
		return
	}
	cfg := r.b.cfg
	ext := map[string]string{
		"brokerName": cfg.BrokerName, "brokerAddr": cfg.AdvertisedAddr, "clusterName": cfg.ClusterName,
		"haServerAddr": cfg.haAddr(), "brokerId": itoa(cfg.BrokerID),
		"heartbeatTimeoutMillis": itoa(cfg.ChannelExpiredTimeout.Milliseconds()),
		"enableActingMaster":     "false", "compressed": "false",
		"bodyCrc32": strconv.FormatUint(uint64(crc32.ChecksumIEEE(body)&0x7FFFFFFF), 10),
	}
	if cfg.MasterEpoch != 0 {
		ext["masterEpoch"] = strconv.FormatUint(uint64(cfg.MasterEpoch), 10)
	}
	add := func(f func() map[string]string) {
		for k, v := range f() {
			if _, ok := ext[k]; !ok { // never RocketMQ's own fields
				ext[k] = v
			}
		}
	}
	if f := r.ext.Load(); f != nil {
		add(*f)
	}
	r.moreMu.Lock()
	more := make([]func() map[string]string, 0, len(r.more))
	for _, f := range r.more {
		more = append(more, f)
	}
	r.moreMu.Unlock()
	for _, f := range more {
		add(f)
	}
	r.callAll(ctx, remoting.ReqRegisterBroker, ext, body)
}

// unregisterAll tells every NameServer the broker is leaving.
func (r *registrar) unregisterAll(ctx context.Context) {
	cfg := r.b.cfg
	ext := map[string]string{
		"brokerName": cfg.BrokerName, "brokerAddr": cfg.AdvertisedAddr,
		"clusterName": cfg.ClusterName, "brokerId": itoa(cfg.BrokerID),
	}
	r.callAll(ctx, remoting.ReqUnregisterBroker, ext, nil)
}

func (r *registrar) callAll(ctx context.Context, code int16, ext map[string]string, body []byte) {
	var wg sync.WaitGroup
	for _, addr := range r.b.cfg.NamesrvAddrs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx, cancel := context.WithTimeout(ctx, r.b.cfg.RegisterTimeout)
			defer cancel()
			if err := r.call(cctx, addr, code, ext, body); err != nil {
				r.b.log.Warn("namesrv call failed", "namesrv", addr, "code", code, "err", err)
			} else if code == remoting.ReqRegisterBroker {
				r.lastOK.Store(r.b.cfg.Now().UnixMilli())
			}
		}()
	}
	wg.Wait()
}

func (r *registrar) call(ctx context.Context, addr string, code int16, ext map[string]string, body []byte) error {
	c, err := r.client(ctx, addr)
	if err != nil {
		return err
	}
	req := remoting.NewRequest(code, ext, body)
	resp, err := c.Invoke(ctx, req)
	if err != nil {
		r.drop(addr, c)
		return err
	}
	if resp.Code != remoting.ResSuccess {
		return protoErrorf(resp.Code, "namesrv %s answered %d: %s", addr, resp.Code, resp.Remark)
	}
	if f := r.answer.Load(); f != nil && code == remoting.ReqRegisterBroker {
		(*f)(resp.ExtFields)
	}
	if f := r.b.cfg.OnMasterAddress; f != nil && code == remoting.ReqRegisterBroker {
		if ha := resp.Ext("haServerAddr"); ha != "" {
			f(resp.Ext("masterAddr"), ha)
		}
	}
	return nil
}

func (r *registrar) client(ctx context.Context, addr string) (*remoting.Client, error) {
	r.mu.Lock()
	c := r.clients[addr]
	r.mu.Unlock()
	if c != nil {
		select {
		case <-c.Done(): // the client does not reconnect: dial again
			r.drop(addr, c)
		default:
			return c, nil
		}
	}
	var tc *tls.Config
	if r.b.cfg.NamesrvTLS != nil {
		tc = r.b.cfg.NamesrvTLS(addr)
	}
	c, err := remoting.Dial(ctx, addr, remoting.ClientConfig{TLS: tc})
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	if old := r.clients[addr]; old != nil {
		r.mu.Unlock()
		c.Close()
		return old, nil
	}
	r.clients[addr] = c
	r.mu.Unlock()
	return c, nil
}

func (r *registrar) drop(addr string, c *remoting.Client) {
	r.mu.Lock()
	if r.clients[addr] == c {
		delete(r.clients, addr)
	}
	r.mu.Unlock()
	c.Close()
}

func (r *registrar) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for addr, c := range r.clients {
		c.Close()
		delete(r.clients, addr)
	}
}
