package main

// The front doors' metric hooks: each door's traffic counters (doorstats)
// and an observer that forwards its sends and deliveries to the metrics
// once the HTTP starter made them (the doors start before it).

import (
	"time"

	"github.com/keelmq/keel/internal/doorstats"
)

// doorTraffic holds every listener's traffic counters.
type doorTraffic struct {
	rocketmq, kafka, amqp doorstats.Counters
}

// doorSnapshots is metrics.Sources.Doors: the counters of the doors this
// process serves.
func (p *parts) doorSnapshots() []doorstats.Snapshot {
	out := []doorstats.Snapshot{p.traffic.rocketmq.Snapshot(doorstats.RocketMQ)}
	if p.kafka.Load() != nil {
		out = append(out, p.traffic.kafka.Snapshot(doorstats.Kafka))
	}
	if p.amqp != nil {
		out = append(out, p.traffic.amqp.Snapshot(doorstats.AMQP))
	}
	return out
}

// doorObserver is a Kafka or AMQP door's Observer: it counts in the
// metrics' shared series under its door's name, nothing before the
// metrics exist.
type doorObserver struct {
	p    *parts
	door string
}

func (o doorObserver) OnSend(topic string, msgs, bytes int, result string, d time.Duration) {
	if m := o.p.metrics.Load(); m != nil {
		m.Door(o.door).OnSend(topic, msgs, bytes, result, d)
	}
}

func (o doorObserver) OnDeliver(topic string, msgs int) {
	if m := o.p.metrics.Load(); m != nil {
		m.Door(o.door).OnDeliver(topic, msgs)
	}
}
