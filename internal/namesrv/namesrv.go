package namesrv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"maps"
	"strconv"
	"sync"
	"time"

	"github.com/keelmq/keel/internal/remoting"
)

// Defaults (Java NameServer values).
const (
	DefaultBrokerTimeout = 120 * time.Second
	DefaultScanInterval  = 5 * time.Second
	// DefaultMaxTopicsPerRegistration bounds one REGISTER_BROKER body.
	DefaultMaxTopicsPerRegistration = 1 << 20
)

// Config configures a Server. Zero values take the defaults.
type Config struct {
	BrokerTimeout            time.Duration // expire a broker not registered for this long
	ScanInterval             time.Duration // how often Run checks for expired brokers
	MaxTopicsPerRegistration int
	Now                      func() time.Time // clock; default time.Now
	Logger                   *slog.Logger
	// MasterEpochs are the highest master epochs per broker name a
	// previous run kept (SaveMasterEpochs): a restarted NameServer still
	// refuses a master below them.
	MasterEpochs map[string]uint32
	// SaveMasterEpochs, if set, keeps the table of master epochs durably
	// each time a registration raises one, before that registration is
	// applied and answered; an error refuses the registration (the
	// broker registers again) and changes nothing. Nil: in memory only.
	SaveMasterEpochs func(map[string]uint32) error
}

// Server is the NameServer's state and request handler.
type Server struct {
	cfg       Config
	log       *slog.Logger
	handlers  map[int16]func(*remoting.Conn, *remoting.Command) *remoting.Command
	done      chan struct{}
	closeOnce sync.Once

	mu sync.RWMutex
	t  *table
}

// New makes a NameServer. Nothing runs until Run.
func New(cfg Config) *Server {
	if cfg.BrokerTimeout <= 0 {
		cfg.BrokerTimeout = DefaultBrokerTimeout
	}
	if cfg.ScanInterval <= 0 {
		cfg.ScanInterval = DefaultScanInterval
	}
	if cfg.MaxTopicsPerRegistration <= 0 {
		cfg.MaxTopicsPerRegistration = DefaultMaxTopicsPerRegistration
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	s := &Server{cfg: cfg, log: cfg.Logger, done: make(chan struct{}), t: newTable()}
	for name, e := range cfg.MasterEpochs {
		s.t.masterEpochs[name] = e
	}
	s.handlers = map[int16]func(*remoting.Conn, *remoting.Command) *remoting.Command{
		remoting.ReqRegisterBroker:                s.handleRegister,
		remoting.ReqUnregisterBroker:              s.handleUnregister,
		remoting.ReqGetRouteInfoByTopic:           s.handleRoute,
		remoting.ReqGetBrokerClusterInfo:          s.handleClusterInfo,
		remoting.ReqGetAllTopicListFromNameServer: s.handleTopicList,
		remoting.ReqDeleteTopicInNamesrv:          s.handleDeleteTopic,
		remoting.ReqGetKafkaCluster:               s.handleKafkaCluster,
		remoting.ReqGetAMQPCluster:                s.handleAMQPCluster,
	}
	return s
}

// Handler serves NameServer requests; other codes get
// REQUEST_CODE_NOT_SUPPORTED.
func (s *Server) Handler() remoting.Handler {
	return remoting.HandlerFunc(func(_ context.Context, c *remoting.Conn, req *remoting.Command) *remoting.Command {
		h := s.handlers[req.Code]
		if h == nil {
			return req.NewResponse(remoting.ResRequestCodeNotSupported, fmt.Sprintf("request type %d not supported", req.Code))
		}
		return h(c, req)
	})
}

// Run expires silent brokers every ScanInterval until ctx ends or Close.
func (s *Server) Run(ctx context.Context) error {
	tick := time.NewTicker(s.cfg.ScanInterval)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			s.ExpireBrokers()
		case <-ctx.Done():
			return nil
		case <-s.done:
			return nil
		}
	}
}

// Close stops Run. It is idempotent.
func (s *Server) Close() error {
	s.closeOnce.Do(func() { close(s.done) })
	return nil
}

// ExpireBrokers removes brokers whose last registration is older than
// their timeout and returns their addresses.
func (s *Server) ExpireBrokers() []string {
	now := s.cfg.Now()
	s.mu.Lock()
	removed := s.t.removeLive(func(_ string, lb *liveBroker) bool {
		timeout := lb.timeout
		if timeout <= 0 {
			timeout = s.cfg.BrokerTimeout
		}
		return now.Sub(lb.lastUpdate) > timeout
	})
	s.mu.Unlock()
	for _, addr := range removed {
		s.log.Warn("namesrv: broker expired", "broker_addr", addr)
	}
	return removed
}

// OnConnClose unregisters the brokers that registered over c. Wire it
// into remoting.ServerConfig.OnConnClose.
func (s *Server) OnConnClose(c *remoting.Conn) {
	s.mu.Lock()
	removed := s.t.removeLive(func(_ string, lb *liveBroker) bool { return lb.conn == c })
	s.mu.Unlock()
	for _, addr := range removed {
		s.log.Info("namesrv: broker connection closed, unregistered", "broker_addr", addr)
	}
}

func (s *Server) handleRegister(c *remoting.Conn, req *remoting.Command) *remoting.Command {
	r, err := s.decodeRegistration(req)
	if err != nil {
		s.log.Warn("namesrv: bad broker registration", "remote", c.RemoteAddr().String(), "err", err)
		return req.NewResponse(remoting.ResSystemError, err.Error())
	}
	s.mu.Lock()
	if held, stale := s.t.staleMaster(r); stale {
		s.mu.Unlock()
		s.log.Warn("namesrv: ignored a master registration of an older epoch", "broker", r.name, "broker_addr", r.addr,
			"master_epoch", r.masterEpoch, "held_epoch", held)
		return req.NewResponse(remoting.ResSystemError, fmt.Sprintf(
			"namesrv: broker %s: a master at epoch %d is registered; this registration as brokerId 0 at epoch %d is ignored", r.name, held, r.masterEpoch))
	}
	if save := s.cfg.SaveMasterEpochs; save != nil && r.id == masterID && r.masterEpoch > s.t.masterEpochs[r.name] {
		next := maps.Clone(s.t.masterEpochs)
		next[r.name] = r.masterEpoch
		if err := save(next); err != nil {
			s.mu.Unlock()
			s.log.Error("namesrv: cannot keep a new master epoch; the registration is refused", "broker", r.name,
				"broker_addr", r.addr, "master_epoch", r.masterEpoch, "err", err)
			return req.NewResponse(remoting.ResSystemError, fmt.Sprintf("namesrv: broker %s: master epoch %d not kept: %v", r.name, r.masterEpoch, err))
		}
	}
	refused := ""
	if holder := s.t.kafkaConflict(r); holder != "" {
		// The RocketMQ registration stands (a cluster upgraded with
		// every broker at its default node id keeps serving RocketMQ
		// clients); only the Kafka door is left out.
		refused = fmt.Sprintf("kafkaNodeId %d is held by %s in cluster %s: this broker is left out of the Kafka cluster; give every broker a unique kafkaNodeId",
			r.kafka.NodeID, holder, r.cluster)
		r.kafka = nil
	}
	masterAddr, haAddr, isNew := s.t.register(r, c, s.cfg.Now())
	s.mu.Unlock()
	if refused != "" {
		s.log.Warn("namesrv: broker's Kafka door refused", "broker", r.name, "broker_id", r.id, "broker_addr", r.addr, "err", refused)
	}
	if isNew {
		s.log.Info("namesrv: broker registered", "cluster", r.cluster, "broker", r.name,
			"broker_id", r.id, "broker_addr", r.addr, "topics", len(r.topics))
	}
	resp := req.NewResponse(remoting.ResSuccess, "")
	resp.ExtFields = map[string]string{"masterAddr": masterAddr, "haServerAddr": haAddr}
	if refused != "" {
		resp.ExtFields["kafkaRefused"] = refused
	}
	return resp
}

func (s *Server) decodeRegistration(req *remoting.Command) (registration, error) {
	r := registration{
		cluster: req.Ext("clusterName"), name: req.Ext("brokerName"),
		addr: req.Ext("brokerAddr"), haServerAddr: req.Ext("haServerAddr"),
	}
	if r.cluster == "" || r.name == "" || r.addr == "" {
		return r, errors.New("namesrv: register broker: clusterName, brokerName and brokerAddr are required")
	}
	id, err := req.ExtInt64("brokerId")
	if err != nil || id < 0 {
		return r, fmt.Errorf("namesrv: register broker %s: bad brokerId %q", r.addr, req.Ext("brokerId"))
	}
	r.id = id
	if v := req.Ext("masterEpoch"); v != "" {
		e, err := strconv.ParseUint(v, 10, 32)
		if err != nil {
			return r, fmt.Errorf("namesrv: register broker %s: bad masterEpoch %q", r.addr, v)
		}
		r.masterEpoch = uint32(e)
	}
	if ms, err := req.ExtInt64("heartbeatTimeoutMillis"); err == nil && ms > 0 {
		r.timeout = time.Duration(ms) * time.Millisecond
	}
	if r.amqpAddr, err = decodeAMQPAddr(req, "amqpAddr"); err != nil {
		return r, fmt.Errorf("namesrv: register broker %s: %w", r.addr, err)
	}
	if r.amqpsAddr, err = decodeAMQPAddr(req, "amqpsAddr"); err != nil {
		return r, fmt.Errorf("namesrv: register broker %s: %w", r.addr, err)
	}
	if r.kafka, err = decodeKafkaRegistration(req); err != nil {
		return r, fmt.Errorf("namesrv: register broker %s: %w", r.addr, err)
	}
	if req.Ext("compressed") == "true" {
		return r, fmt.Errorf("namesrv: register broker %s: compressed registration body is not supported", r.addr)
	}
	if want, err := req.ExtInt64("bodyCrc32"); err == nil && want != 0 {
		if got := bodyCRC(req.Body); got != want {
			return r, fmt.Errorf("namesrv: register broker %s: body crc32 %d, header says %d", r.addr, got, want)
		}
	}
	r.topics, err = s.decodeTopics(req.Body)
	if err != nil {
		return r, fmt.Errorf("namesrv: register broker %s: %w", r.addr, err)
	}
	return r, nil
}

// decodeTopics parses a RegisterBrokerBody and validates its topics.
func (s *Server) decodeTopics(body []byte) (map[string]wireTopicConfig, error) {
	if len(body) == 0 {
		return nil, nil
	}
	var rb registerBody
	if err := json.Unmarshal(body, &rb); err != nil {
		return nil, fmt.Errorf("body: %w", err)
	}
	topics := rb.TopicConfigSerializeWrapper.TopicConfigTable
	if len(topics) > s.cfg.MaxTopicsPerRegistration {
		return nil, fmt.Errorf("%d topics exceed the limit of %d", len(topics), s.cfg.MaxTopicsPerRegistration)
	}
	for name, tc := range topics {
		if name == "" || tc.ReadQueueNums < 0 || tc.WriteQueueNums < 0 || tc.Perm < 0 || tc.Perm > 0xF {
			return nil, fmt.Errorf("topic %q: invalid config %+v", name, tc)
		}
	}
	return topics, nil
}

func (s *Server) handleUnregister(_ *remoting.Conn, req *remoting.Command) *remoting.Command {
	name, addr := req.Ext("brokerName"), req.Ext("brokerAddr")
	id, err := req.ExtInt64("brokerId")
	if name == "" || addr == "" || err != nil {
		return req.NewResponse(remoting.ResSystemError, "namesrv: unregister broker: brokerName, brokerAddr and brokerId are required")
	}
	s.mu.Lock()
	s.t.unregister(name, addr, id)
	s.mu.Unlock()
	s.log.Info("namesrv: broker unregistered", "broker", name, "broker_addr", addr, "broker_id", id)
	return req.NewResponse(remoting.ResSuccess, "")
}

func (s *Server) handleRoute(_ *remoting.Conn, req *remoting.Command) *remoting.Command {
	topic := req.Ext("topic")
	s.mu.RLock()
	rd, ok := s.t.route(topic)
	s.mu.RUnlock()
	if !ok {
		return req.NewResponse(remoting.ResTopicNotExist, "No topic route info in name server for the topic: "+topic)
	}
	return jsonResponse(req, rd)
}

func (s *Server) handleClusterInfo(_ *remoting.Conn, req *remoting.Command) *remoting.Command {
	s.mu.RLock()
	ci := s.t.clusterInfo()
	s.mu.RUnlock()
	return jsonResponse(req, ci)
}

func (s *Server) handleTopicList(_ *remoting.Conn, req *remoting.Command) *remoting.Command {
	s.mu.RLock()
	tl := topicList{TopicList: s.t.topicNames()}
	s.mu.RUnlock()
	return jsonResponse(req, tl)
}

func (s *Server) handleDeleteTopic(_ *remoting.Conn, req *remoting.Command) *remoting.Command {
	topic := req.Ext("topic")
	if topic == "" {
		return req.NewResponse(remoting.ResSystemError, "namesrv: delete topic: topic is required")
	}
	cluster, broker := req.Ext("clusterName"), req.Ext("brokerName")
	s.mu.Lock()
	s.t.deleteTopic(topic, cluster, broker)
	s.mu.Unlock()
	s.log.Info("namesrv: topic deleted", "topic", topic, "cluster", cluster, "broker", broker)
	return req.NewResponse(remoting.ResSuccess, "")
}

func jsonResponse(req *remoting.Command, v any) *remoting.Command {
	body, err := json.Marshal(v)
	if err != nil { // only plain structs, maps and slices: cannot fail
		panic(fmt.Sprintf("namesrv: marshal %T: %v", v, err))
	}
	resp := req.NewResponse(remoting.ResSuccess, "")
	resp.Body = body
	return resp
}

// bodyCRC is Java's UtilAll.crc32: CRC32 (IEEE) masked to 31 bits.
func bodyCRC(body []byte) int64 { return int64(crc32.ChecksumIEEE(body) & 0x7FFFFFFF) }
