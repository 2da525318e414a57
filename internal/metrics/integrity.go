package metrics

// Store integrity: records isolated because they failed verification, read
// faults (bad bytes from a read whose re-read verified) and the background
// scrubber's progress and findings. A collector of its own, read from
// store.IntegrityStats at scrape time.

import "github.com/prometheus/client_golang/prometheus"

var (
	dReadFaults    = desc("keel_store_read_faults_total", "Reads that returned bytes failing verification while the record on disk verified when read again (served; the fault was the read's).")
	dIsolatedTotal = desc("keel_store_isolated_records_total", "Corrupt records isolated since the broker started (never delivered; consumers continue after them).")
	dIsolated      = desc("keel_store_isolated_records", "Records listed in the store's registry of isolated records (keel corrupt list).")
	dScrubBytes    = desc("keel_store_scrub_bytes_total", "Bytes the background scrubber re-read to verify the store at rest.")
	dScrubPasses   = desc("keel_store_scrub_passes_total", "Completed scrubber passes over the whole store.")
	dScrubProblems = desc("keel_store_scrub_problems_total", "Problems the scrubber found (keel check's terms): corrupt records, bad ConsumeQueue entries, damaged index files.")
	dScrubRate     = desc("keel_store_scrub_rate_bytes", "Configured scrubber rate in bytes per second (scrubBytesPerSecond; 0: off).")
	dRecRepaired   = desc("keel_store_recovery_repaired_total", "Corrupt CommitLog ranges in durable data that recovery at this start replaced by hole records (--repair-corruption; originals in quarantine/*.corrupt).")
	dRecUnsynced   = desc("keel_store_recovery_unsynced_bytes_total", "Bytes recovery at this start cut after a crash as an unsynced tail written back out of order (past the last completed fdatasync; in quarantine/*.unsynced).")
	integrityDescs = []*prometheus.Desc{dReadFaults, dIsolatedTotal, dIsolated, dScrubBytes, dScrubPasses, dScrubProblems, dScrubRate, dRecRepaired, dRecUnsynced}
)

type integrityCollector struct{ m *Metrics }

func (c *integrityCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range integrityDescs {
		ch <- d
	}
}

func (c *integrityCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.m.cfg.Store
	if st == nil {
		return
	}
	s := st.IntegrityStats()
	counter(ch, dReadFaults, float64(s.ReadFaults))
	counter(ch, dIsolatedTotal, float64(s.Isolated))
	gauge(ch, dIsolated, float64(s.Listed))
	counter(ch, dScrubBytes, float64(s.Scrub.Bytes))
	counter(ch, dScrubPasses, float64(s.Scrub.Passes))
	counter(ch, dScrubProblems, float64(s.Scrub.Problems))
	gauge(ch, dScrubRate, float64(s.Scrub.BytesPerSecond))
	counter(ch, dRecRepaired, float64(s.RecoveryRepaired))
	counter(ch, dRecUnsynced, float64(s.UnsyncedTailBytes))
}
