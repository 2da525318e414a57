package namesrv

import (
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/keelmq/keel/internal/remoting"
)

// masterID is the brokerId of a master.
const masterID = 0

type brokerEntry struct {
	cluster string
	name    string
	addrs   map[int64]string // brokerId -> address
}

type liveBroker struct {
	cluster, name string
	id            int64
	haServerAddr  string
	lastUpdate    time.Time
	timeout       time.Duration // 0: the server's BrokerTimeout
	conn          *remoting.Conn
	kafka         *KafkaRegistration // nil: no Kafka door (kafka.go)
	amqpAddr      string             // "": no AMQP door (amqp.go)
	amqpsAddr     string             // "": no AMQP-over-TLS door
}

// registration is a decoded REGISTER_BROKER request.
type registration struct {
	cluster, name, addr, haServerAddr string
	id                                int64
	masterEpoch                       uint32 // 0: none given
	timeout                           time.Duration
	topics                            map[string]wireTopicConfig
	kafka                             *KafkaRegistration
	amqpAddr, amqpsAddr               string
}

// table is the route table; the Server guards it with its mutex.
type table struct {
	clusters map[string]map[string]struct{} // cluster -> broker names
	brokers  map[string]*brokerEntry        // broker name -> entry
	topics   map[string]map[string]queueData
	live     map[string]*liveBroker // broker address -> liveness
	// masterEpochs is the highest masterEpoch a brokerId 0 registration
	// of each broker name carried; kept when the name leaves, so that a
	// stale master returning later is still ignored.
	masterEpochs map[string]uint32
}

func newTable() *table {
	return &table{
		clusters: make(map[string]map[string]struct{}),
		brokers:  make(map[string]*brokerEntry),
		topics:   make(map[string]map[string]queueData),
		live:     make(map[string]*liveBroker),

		masterEpochs: make(map[string]uint32),
	}
}

// staleMaster reports whether r is a master's registration of a lower
// masterEpoch than the one held for its broker name (the held epoch is
// returned): it must be ignored, so that the NameServer never serves two
// masters of one group.
func (t *table) staleMaster(r registration) (uint32, bool) {
	held := t.masterEpochs[r.name]
	return held, r.id == masterID && r.masterEpoch < held
}

// register applies a registration (staleMaster must have said no). It
// returns the master's address and HA address for a slave, and whether
// the address was not live before.
func (t *table) register(r registration, conn *remoting.Conn, now time.Time) (masterAddr, haAddr string, isNew bool) {
	if r.id == masterID && r.masterEpoch > t.masterEpochs[r.name] {
		t.masterEpochs[r.name] = r.masterEpoch
		if be := t.brokers[r.name]; be != nil {
			if old := be.addrs[masterID]; old != "" && old != r.addr {
				// The replaced master's address leaves the routes now,
				// not when its liveness expires.
				delete(be.addrs, masterID)
				delete(t.live, old)
			}
		}
	}
	be := t.brokers[r.name]
	if be == nil {
		be = &brokerEntry{cluster: r.cluster, name: r.name, addrs: make(map[int64]string)}
		t.brokers[r.name] = be
	}
	if be.cluster != r.cluster {
		t.removeFromCluster(be.cluster, r.name)
		be.cluster = r.cluster
	}
	if t.clusters[r.cluster] == nil {
		t.clusters[r.cluster] = make(map[string]struct{})
	}
	t.clusters[r.cluster][r.name] = struct{}{}
	// One address has one brokerId: drop it under any other id.
	for id, addr := range be.addrs {
		if addr == r.addr && id != r.id {
			delete(be.addrs, id)
		}
	}
	be.addrs[r.id] = r.addr
	if r.id == masterID {
		for name, tc := range r.topics {
			t.putQueueData(name, r.name, tc)
		}
	}
	_, known := t.live[r.addr]
	t.live[r.addr] = &liveBroker{cluster: r.cluster, name: r.name, id: r.id, haServerAddr: r.haServerAddr,
		lastUpdate: now, timeout: r.timeout, conn: conn, kafka: r.kafka, amqpAddr: r.amqpAddr, amqpsAddr: r.amqpsAddr}
	if r.id != masterID {
		masterAddr = be.addrs[masterID]
		if lb := t.live[masterAddr]; lb != nil {
			haAddr = lb.haServerAddr
		}
	}
	return masterAddr, haAddr, !known
}

func (t *table) putQueueData(topic, brokerName string, tc wireTopicConfig) {
	qds := t.topics[topic]
	if qds == nil {
		qds = make(map[string]queueData)
		t.topics[topic] = qds
	}
	qds[brokerName] = queueData{BrokerName: brokerName, Perm: tc.Perm, ReadQueueNums: tc.ReadQueueNums,
		TopicSysFlag: tc.TopicSysFlag, WriteQueueNums: tc.WriteQueueNums}
}

// unregister removes addr as brokerId id of broker name. When it was the
// name's last address, the name leaves its cluster and every topic.
// It reports whether the name was removed.
func (t *table) unregister(name, addr string, id int64) bool {
	delete(t.live, addr)
	be := t.brokers[name]
	if be == nil {
		return false
	}
	if be.addrs[id] == addr {
		delete(be.addrs, id)
	}
	if len(be.addrs) > 0 {
		return false
	}
	delete(t.brokers, name)
	t.removeFromCluster(be.cluster, name)
	for topic, qds := range t.topics {
		delete(qds, name)
		if len(qds) == 0 {
			delete(t.topics, topic)
		}
	}
	return true
}

func (t *table) removeFromCluster(cluster, name string) {
	names := t.clusters[cluster]
	delete(names, name)
	if len(names) == 0 {
		delete(t.clusters, cluster)
	}
}

// removeLive unregisters every live address matching match and returns
// the removed addresses.
func (t *table) removeLive(match func(addr string, lb *liveBroker) bool) []string {
	var removed []string
	for addr, lb := range t.live {
		if match(addr, lb) {
			t.unregister(lb.name, addr, lb.id)
			removed = append(removed, addr)
		}
	}
	slices.Sort(removed)
	return removed
}

// route builds the TopicRouteData of topic; ok is false when no broker
// currently serves it.
func (t *table) route(topic string) (rd topicRouteData, ok bool) {
	qds := t.topics[topic]
	if len(qds) == 0 {
		return rd, false
	}
	rd.FilterServerTable = map[string][]string{}
	for _, name := range slices.Sorted(maps.Keys(qds)) {
		rd.QueueDatas = append(rd.QueueDatas, qds[name])
		if be := t.brokers[name]; be != nil {
			rd.BrokerDatas = append(rd.BrokerDatas, be.wire())
		}
	}
	return rd, len(rd.BrokerDatas) > 0
}

func (be *brokerEntry) wire() brokerData {
	addrs := make(map[string]string, len(be.addrs))
	for id, a := range be.addrs {
		addrs[strconv.FormatInt(id, 10)] = a
	}
	return brokerData{BrokerAddrs: addrs, BrokerName: be.name, Cluster: be.cluster}
}

func (t *table) clusterInfo() clusterInfo {
	ci := clusterInfo{BrokerAddrTable: make(map[string]brokerData), ClusterAddrTable: make(map[string][]string)}
	for name, be := range t.brokers {
		ci.BrokerAddrTable[name] = be.wire()
	}
	for cluster, names := range t.clusters {
		ci.ClusterAddrTable[cluster] = slices.Sorted(maps.Keys(names))
	}
	return ci
}

func (t *table) topicNames() []string {
	return slices.Sorted(maps.Keys(t.topics))
}

// deleteTopic removes topic, or only its queues on the brokers of cluster
// and on the broker group broker when either is not empty.
func (t *table) deleteTopic(topic, cluster, broker string) {
	if cluster == "" && broker == "" {
		delete(t.topics, topic)
		return
	}
	qds := t.topics[topic]
	for name := range t.clusters[cluster] {
		delete(qds, name)
	}
	if broker != "" {
		delete(qds, broker)
	}
	if len(qds) == 0 {
		delete(t.topics, topic)
	}
}
