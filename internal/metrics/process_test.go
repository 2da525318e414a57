package metrics

import (
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
)

// TestNoNamespaceWideNetworkCounters: the process metrics leave out the
// network byte counters, which count the whole network namespace rather
// than this process, and keep the others.
func TestNoNamespaceWideNetworkCounters(t *testing.T) {
	m := New(Config{IncludeGoMetrics: true})
	w := httptest.NewRecorder()
	m.Handler().ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	body := w.Body.String()
	if strings.Contains(body, "process_network_") {
		t.Errorf("/metrics has namespace-wide network counters:\n%s", grepLines(body, "process_network_"))
	}
	if runtime.GOOS == "linux" && !strings.Contains(body, "\nprocess_cpu_seconds_total ") {
		t.Errorf("/metrics lost the other process metrics:\n%s", grepLines(body, "process_"))
	}
	if !strings.Contains(body, "\ngo_goroutines ") {
		t.Errorf("/metrics lost the Go runtime metrics")
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
