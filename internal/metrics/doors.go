package metrics

// Per-door traffic: every listener's connections, requests, errors and
// bytes (doorstats counters the doors keep), read at scrape time and
// labelled by door. keel_connections (with the door label) is the open
// connections of each.

import "github.com/prometheus/client_golang/prometheus"

var (
	dDoorAccepted = desc("keel_door_connections_total", "Connections accepted by a front door's listener (also those refused at once).", "door")
	dDoorRequests = desc("keel_door_requests_total", "Requests read by a front door (RocketMQ frames, Kafka requests, AMQP methods).", "door")
	dDoorErrors   = desc("keel_door_errors_total", "Requests a front door answered with an error, and connections it closed for a protocol error.", "door")
	dDoorBytesIn  = desc("keel_door_received_bytes_total", "Bytes read from a front door's connections.", "door")
	dDoorBytesOut = desc("keel_door_sent_bytes_total", "Bytes written to a front door's connections.", "door")
)

var doorDescs = []*prometheus.Desc{dDoorAccepted, dDoorRequests, dDoorErrors, dDoorBytesIn, dDoorBytesOut}

func (c *collector) collectDoors(ch chan<- prometheus.Metric) {
	src := c.m.cfg.Doors
	if src == nil {
		return
	}
	for _, d := range src() {
		gauge(ch, dConnections, float64(d.Open), d.Door)
		counter(ch, dDoorAccepted, float64(d.Accepted), d.Door)
		counter(ch, dDoorRequests, float64(d.Requests), d.Door)
		counter(ch, dDoorErrors, float64(d.Errors), d.Door)
		counter(ch, dDoorBytesIn, float64(d.BytesIn), d.Door)
		counter(ch, dDoorBytesOut, float64(d.BytesOut), d.Door)
	}
}
