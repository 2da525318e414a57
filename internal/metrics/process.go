package metrics

import (
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// misleadingProcessMetrics are process collector series that do not
// describe the process: on Linux the network byte counters read
// /proc/<pid>/net/dev, the totals of every interface of the network
// namespace (every process on the host, outside a container).
var misleadingProcessMetrics = []string{
	"process_network_receive_bytes_total",
	"process_network_transmit_bytes_total",
}

// processCollector is Prometheus' process collector without
// misleadingProcessMetrics.
func processCollector() prometheus.Collector {
	return dropMetrics{collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), misleadingProcessMetrics}
}

// dropMetrics is a collector without the series of the given names.
type dropMetrics struct {
	prometheus.Collector
	names []string
}

func (d dropMetrics) dropped(desc *prometheus.Desc) bool {
	s := desc.String()
	for _, n := range d.names {
		if strings.Contains(s, `fqName: "`+n+`"`) {
			return true
		}
	}
	return false
}

func (d dropMetrics) Describe(ch chan<- *prometheus.Desc) {
	all := make(chan *prometheus.Desc)
	go func() { d.Collector.Describe(all); close(all) }()
	for desc := range all {
		if !d.dropped(desc) {
			ch <- desc
		}
	}
}

func (d dropMetrics) Collect(ch chan<- prometheus.Metric) {
	all := make(chan prometheus.Metric)
	go func() { d.Collector.Collect(all); close(all) }()
	for m := range all {
		if !d.dropped(m.Desc()) {
			ch <- m
		}
	}
}
