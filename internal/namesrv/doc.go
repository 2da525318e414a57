// Package namesrv is the NameServer: brokers register their topics with
// it, and clients ask it where a topic's queues live.
//
// Route table (guarded by one RWMutex in Server):
//
//	clusters: cluster name -> broker names
//	brokers:  broker name  -> cluster, brokerId -> address
//	topics:   topic        -> broker name -> QueueData (queue counts, perm)
//	live:     broker address -> last registration time, connection, HA address,
//	          Kafka door (address, node id, epoch, in-sync set; kafka.go)
//
// Semantics follow the Java NameServer: queue data is keyed by broker name
// and comes only from the master's (brokerId 0) registration; a
// registration adds or updates topics but never removes them (Java brokers
// also send incremental registrations), so topics disappear through
// DELETE_TOPIC_IN_NAMESRV or when every broker of the name is gone. A
// broker is removed when it has not registered for BrokerTimeout (checked
// every ScanInterval by Run) or at once when the connection it registered
// on closes (wire OnConnClose into remoting.ServerConfig.OnConnClose).
// Removing the last address of a broker name removes that name from every
// topic and cluster.
//
// Master epochs (controller mode): a registration may carry masterEpoch
// (a Keel field; official brokers send none, which counts as 0). The
// table keeps, per broker name, the highest epoch a brokerId 0
// registration carried, also after the name left the routes. A brokerId
// 0 registration below it is refused with an error and changes nothing;
// one above it replaces the master address at once (the replaced
// master's address leaves the routes without waiting for its expiry). So
// one NameServer never serves two masters of one group. With
// Config.SaveMasterEpochs (keel namesrv --data-dir) the table is kept
// durably before a registration that raises it is applied, and
// Config.MasterEpochs loads it at start, so a restarted NameServer still
// refuses a stale master; without, the epochs live in memory and a
// restarted NameServer takes the first master that registers.
//
// TopicRouteData is written as compact JSON with quoted brokerId keys and
// no whitespace: the Go client parses brokerAddrs as raw text and any
// space corrupts it.
//
// GET_KAFKA_CLUSTER (Keel's request 10440) answers a cluster's Kafka
// brokers and the groups hosting each topic, from which a broker's Kafka
// door derives Metadata (kafka.go).
//
// The broker side uses RegisterBroker and UnregisterBroker over a
// remoting.Client.
package namesrv
