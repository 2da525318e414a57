package metrics

// Scrape-time gauges and counters read from snapshots.

import (
	"time"

	"github.com/keelmq/keel/internal/broker"
	"github.com/prometheus/client_golang/prometheus"
)

// toolGroups are the groups of the admin tools (internal/admin); they are
// not consumers and get no lag series.
var toolGroups = map[string]bool{"TOOLS_CONSUMER": true, "KEEL_DLQ_RESEND": true}

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, labels, nil)
}

var (
	dCommitLogBytes      = desc("keel_commitlog_bytes", "Bytes of CommitLog retained (written offset minus the oldest retained offset).")
	dCommitLogWritten    = desc("keel_commitlog_written_offset_bytes", "CommitLog offset written (page cache).")
	dCommitLogFlushed    = desc("keel_commitlog_flushed_offset_bytes", "CommitLog offset made durable by fdatasync.")
	dCommitLogConfirmed  = desc("keel_commitlog_confirmed_offset_bytes", "CommitLog offset durable enough to acknowledge and show (flushed under SYNC_FLUSH, written under ASYNC_FLUSH).")
	dCommitLogVisible    = desc("keel_commitlog_visible_offset_bytes", "CommitLog offset visible to consumers (dispatched).")
	dCommitLogUnflushed  = desc("keel_commitlog_unflushed_bytes", "Bytes written but not yet fdatasync'ed (the ASYNC_FLUSH loss window).")
	dStorePuts           = desc("keel_store_puts_total", "Store appends (a batch is one).")
	dStorePutMessages    = desc("keel_store_put_messages_total", "Messages appended to the CommitLog.")
	dStorePutBytes       = desc("keel_store_put_bytes_total", "Record bytes appended to the CommitLog.")
	dStoreGets           = desc("keel_store_gets_total", "Store reads (pulls).")
	dStoreGetMessages    = desc("keel_store_get_messages_total", "Messages read from the store.")
	dStoreWindowHits     = desc("keel_store_read_window_hits_total", "CommitLog reads of consumers and of replication to slaves served from the read window (memory).")
	dStoreWindowMisses   = desc("keel_store_read_window_misses_total", "CommitLog reads of consumers and of replication to slaves served from the file: the read window is off or no longer holds those bytes.")
	dStoreDelayedCommits = desc("keel_store_delayed_commits_total", "SYNC_FLUSH fdatasyncs that waited commitDelayMicros first (the previous one took commitSiblings puts or more).")
	dStoreCorrupt        = desc("keel_store_corrupt_reads_total", "Reads that found a corrupt record (never delivered).")
	dStoreUnconsumedDel  = desc("keel_store_unconsumed_deleted_messages_total", "Messages a consumer group had not consumed that disk-pressure retention deleted (diskPressureDelete=unconsumed); should stay 0.")
	dStoreWritable       = desc("keel_store_writable", "1 if the store accepts writes, 0 if it failed (read-only) or the disk is full.")
	dDiskUsedRatio       = desc("keel_disk_used_ratio", "Used fraction (0..1) of the filesystem holding the store.")
	dDiskTotal           = desc("keel_disk_total_bytes", "Size of the filesystem holding the store.")
	dDiskFree            = desc("keel_disk_free_bytes", "Free bytes of the filesystem holding the store.")
	dHeldPulls           = desc("keel_pull_held_requests", "Pull requests held for long polling.")
	dConnections         = desc("keel_connections", "Open client connections, by front door (rocketmq, kafka, amqp).", "door")
	dProducers           = desc("keel_producers", "Registered producer clients (per group).")
	dConsumers           = desc("keel_consumers", "Registered consumer clients (per group).")
	dGroupsOnline        = desc("keel_consumer_groups_online", "Consumer groups with at least one member online.")
	dTopics              = desc("keel_topics", "Topics configured on the broker, by kind (normal = user topics, retry, dlq, system).", "kind")
	dRegistered          = desc("keel_broker_registered", "1 if a NameServer accepted the broker's registration recently.")
	dTopicMessages       = desc("keel_topic_messages", "Messages retained in a topic (sum over queues of max minus min offset).", "topic")
	dTopicMessagesTotal  = desc("keel_topic_messages_total", "Messages ever stored in a topic (sum over queues of the max offset).", "topic")
	dLag                 = desc("keel_consumer_lag", "Messages stored but not consumed by a group, per queue (Kafka queues: records).", "group", "topic", "queue")
	dGroupLag            = desc("keel_consumer_group_lag", "Messages stored but not consumed by a group, per topic (Kafka queues: records).", "group", "topic")
	dGroupOffset         = desc("keel_consumer_offset", "Sum of a group's committed offsets on a topic (its rate is the consume rate).", "group", "topic")
	dRetryTotal          = desc("keel_consumer_retry_messages_total", "Messages ever put into a group's retry topic.", "group")
	dDLQTotal            = desc("keel_consumer_dlq_messages_total", "Messages ever put into a group's dead-letter topic.", "group")
	dDLQ                 = desc("keel_consumer_dlq_messages", "Messages retained in a group's dead-letter topic.", "group")
	dTxPending           = desc("keel_transaction_half_pending", "Transactional half messages not yet committed or rolled back.")
	dTxPrepared          = desc("keel_transaction_prepared_total", "Transactional half messages stored.")
	dTxCommitted         = desc("keel_transaction_committed_total", "Transactions committed.")
	dTxRolledBack        = desc("keel_transaction_rolled_back_total", "Transactions rolled back.")
	dTxChecks            = desc("keel_transaction_checks_total", "Transaction state checks sent to producers.")
	dLagSeriesTruncation = desc("keel_consumer_lag_series_dropped", "Per-queue lag series left out of this scrape (MaxLagSeries).")
	dOldestAge           = desc("keel_group_oldest_unconsumed_age_seconds", "Age of the oldest message a group has not consumed on a topic (now minus its store time; 0 when caught up).", "group", "topic")
)

var allDescs = []*prometheus.Desc{
	dCommitLogBytes, dCommitLogWritten, dCommitLogFlushed, dCommitLogConfirmed, dCommitLogVisible, dCommitLogUnflushed,
	dStorePuts, dStorePutMessages, dStorePutBytes, dStoreGets, dStoreGetMessages, dStoreWindowHits, dStoreWindowMisses, dStoreDelayedCommits, dStoreCorrupt, dStoreUnconsumedDel, dStoreWritable,
	dDiskUsedRatio, dDiskTotal, dDiskFree, dHeldPulls, dConnections, dProducers, dConsumers, dGroupsOnline,
	dTopics, dRegistered, dTopicMessages, dTopicMessagesTotal, dLag, dGroupLag, dGroupOffset, dRetryTotal,
	dDLQTotal, dDLQ, dTxPending, dTxPrepared, dTxCommitted, dTxRolledBack, dTxChecks, dLagSeriesTruncation,
	dOldestAge,
}

type collector struct{ m *Metrics }

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range allDescs {
		ch <- d
	}
	for _, d := range replicationDescs {
		ch <- d
	}
	for _, d := range amqpDescs {
		ch <- d
	}
	for _, d := range doorDescs {
		ch <- d
	}
	for _, d := range netLimitDescs {
		ch <- d
	}
	for _, d := range controlledDescs {
		ch <- d
	}
	if c.m.cfg.RocketMQNames {
		for _, d := range compatDescs {
			ch <- d
		}
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	c.m.scrapeMu.Lock()
	defer c.m.scrapeMu.Unlock()
	src := c.m.cfg.Sources
	c.collectStore(ch)
	c.collectDisk(ch)
	c.collectDoors(ch) // doors.go
	if src.Broker != nil {
		c.collectBroker(ch, src.Broker)
		c.collectTopics(ch, src.Broker)
		groups := c.collectGroups(ch, src.Broker)
		if c.m.cfg.RocketMQNames {
			c.collectCompat(ch, src.Broker, groups)
		}
	}
	if src.Transactions != nil {
		t := src.Transactions()
		gauge(ch, dTxPending, float64(t.Pending))
		counter(ch, dTxPrepared, float64(t.Prepared))
		counter(ch, dTxCommitted, float64(t.Committed))
		counter(ch, dTxRolledBack, float64(t.RolledBack))
		counter(ch, dTxChecks, float64(t.Checks))
	}
	c.collectReplication(ch) // replication.go
	c.collectAMQP(ch)
	c.collectNetLimits(ch)
	c.collectControlled(ch) // controller.go
}

func gauge(ch chan<- prometheus.Metric, d *prometheus.Desc, v float64, labels ...string) {
	ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
}

func counter(ch chan<- prometheus.Metric, d *prometheus.Desc, v float64, labels ...string) {
	ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
}

func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func (c *collector) collectStore(ch chan<- prometheus.Metric) {
	st := c.m.cfg.Store
	if st == nil {
		return
	}
	s := st.Stats()
	gauge(ch, dCommitLogBytes, float64(s.WrittenOffset-s.MinOffset))
	gauge(ch, dCommitLogWritten, float64(s.WrittenOffset))
	gauge(ch, dCommitLogFlushed, float64(s.FlushedOffset))
	gauge(ch, dCommitLogConfirmed, float64(s.ConfirmedOffset))
	gauge(ch, dCommitLogVisible, float64(s.VisibleOffset))
	gauge(ch, dCommitLogUnflushed, float64(max(s.WrittenOffset-s.FlushedOffset, 0)))
	counter(ch, dStorePuts, float64(s.Puts))
	counter(ch, dStorePutMessages, float64(s.PutMessages))
	counter(ch, dStorePutBytes, float64(s.PutBytes))
	counter(ch, dStoreGets, float64(s.Gets))
	counter(ch, dStoreGetMessages, float64(s.GetMessages))
	counter(ch, dStoreWindowHits, float64(s.WindowHits))
	counter(ch, dStoreWindowMisses, float64(s.WindowMisses))
	counter(ch, dStoreDelayedCommits, float64(s.DelayedCommits))
	counter(ch, dStoreCorrupt, float64(s.CorruptReads))
	counter(ch, dStoreUnconsumedDel, float64(s.UnconsumedDeleted))
	gauge(ch, dStoreWritable, boolGauge(s.ReadOnly == nil && !s.DiskFull))
}

func (c *collector) collectDisk(ch chan<- prometheus.Metric) {
	du := c.m.cfg.DiskUsage
	if du == nil {
		return
	}
	total, free, err := du()
	if err != nil || total == 0 {
		return
	}
	gauge(ch, dDiskTotal, float64(total))
	gauge(ch, dDiskFree, float64(free))
	gauge(ch, dDiskUsedRatio, float64(total-min(free, total))/float64(total))
}

func (c *collector) collectBroker(ch chan<- prometheus.Metric, b *broker.Broker) {
	s := b.Stats()
	gauge(ch, dHeldPulls, float64(s.HeldPulls))
	gauge(ch, dProducers, float64(s.ProducerClients))
	gauge(ch, dConsumers, float64(s.ConsumerClients))
	gauge(ch, dGroupsOnline, float64(s.OnlineGroups))
	for kind, n := range s.TopicsByKind {
		gauge(ch, dTopics, float64(n), string(kind))
	}
	gauge(ch, dRegistered, boolGauge(b.Registered()))
}

func (c *collector) collectTopics(ch chan<- prometheus.Metric, b *broker.Broker) {
	for _, tc := range b.Topics() {
		total, retained, _ := queueTotals(b, tc.TopicName)
		gauge(ch, dTopicMessages, float64(retained), tc.TopicName)
		counter(ch, dTopicMessagesTotal, float64(total), tc.TopicName)
	}
}

// queueTotals sums a topic's max offsets and retained messages; ok is
// false if the topic does not exist.
func queueTotals(b *broker.Broker, topic string) (total, retained int64, ok bool) {
	tc, ok := b.Topic(topic)
	if !ok {
		return 0, 0, false
	}
	st := b.Store()
	for q := int32(0); q < max(tc.ReadQueueNums, tc.WriteQueueNums); q++ {
		hi := st.MaxOffset(topic, q)
		total += hi
		retained += hi - st.MinOffset(topic, q)
	}
	return total, retained, true
}

// groupTopic is a consumer group's progress on one topic, summed over its
// queues.
type groupTopic struct {
	group, topic string
	lag, offset  int64
	// oldestMs is the store time of the oldest unconsumed message over
	// the queues (0: caught up, or not read: see the age budget).
	oldestMs int64
	// ageUnknown: a lagging queue was left unread (age budget spent), so
	// the age is not reported.
	ageUnknown bool
}

// collectGroups emits the consumer metrics and returns the per-topic sums.
// The oldest-unconsumed age reads one message per lagging queue, at most
// MaxLagSeries a scrape (the rest are left out of the age).
func (c *collector) collectGroups(ch chan<- prometheus.Metric, b *broker.Broker) []*groupTopic {
	budget, dropped := c.m.cfg.MaxLagSeries, 0
	ageBudget := c.m.cfg.MaxLagSeries
	now := c.m.now()
	var all []*groupTopic
	for _, g := range b.GroupNames() {
		if toolGroups[g] {
			continue
		}
		perTopic := map[string]*groupTopic{}
		for _, p := range b.ConsumeProgress(g, "") {
			s := perTopic[p.Topic]
			if s == nil {
				s = &groupTopic{group: g, topic: p.Topic}
				perTopic[p.Topic] = s
				all = append(all, s)
			}
			s.lag += p.Lag() // in records: a Kafka batch has an entry per record
			s.offset += p.ConsumerOffset
			switch {
			case p.Lag() > 0 && ageBudget > 0:
				ageBudget--
				if ms := b.OldestUnconsumedTime(p); ms > 0 && (s.oldestMs == 0 || ms < s.oldestMs) {
					s.oldestMs = ms
				}
			case p.Lag() > 0:
				s.ageUnknown = true
			}
			if budget > 0 {
				gauge(ch, dLag, float64(p.Lag()), g, p.Topic, itoa(p.QueueID))
				budget--
			} else {
				dropped++
			}
		}
		for t, s := range perTopic {
			gauge(ch, dGroupLag, float64(s.lag), g, t)
			gauge(ch, dGroupOffset, float64(s.offset), g, t)
			if !s.ageUnknown {
				gauge(ch, dOldestAge, s.ageSeconds(now), g, t)
			}
		}
		if total, _, ok := queueTotals(b, broker.RetryTopic(g)); ok {
			counter(ch, dRetryTotal, float64(total), g)
		}
		if total, retained, ok := queueTotals(b, broker.DLQTopic(g)); ok {
			counter(ch, dDLQTotal, float64(total), g)
			gauge(ch, dDLQ, float64(retained), g)
		} else {
			counter(ch, dDLQTotal, 0, g)
			gauge(ch, dDLQ, 0, g)
		}
	}
	gauge(ch, dLagSeriesTruncation, float64(dropped))
	return all
}

// ageSeconds is how long the oldest unconsumed message has been stored.
func (s *groupTopic) ageSeconds(now time.Time) float64 {
	if s.oldestMs == 0 {
		return 0
	}
	return max(now.Sub(time.UnixMilli(s.oldestMs)).Seconds(), 0)
}
