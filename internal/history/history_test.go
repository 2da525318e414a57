package history

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

// clean is a history that keeps every promise: ten messages over two
// queues, each acknowledged and delivered once to two groups.
func clean() *History {
	h := &History{}
	for i := range 10 {
		id := fmt.Sprintf("m%02d", i)
		body := Body(id, []byte("payload"))
		q := fmt.Sprintf("q%d", i%2)
		h.AddSend(Send{Family: "f", ID: id, Sum: Checksum(body), Start: at(100 * i), End: at(100*i + 10), Acked: true, Queue: q, Offset: int64(i / 2)})
		for _, g := range []string{"g1", "g2"} {
			h.AddDelivery("f", g, q, int64(i/2), body, at(100*i+20))
		}
	}
	return h
}

var both = Expect{Family: "f", Groups: []string{"g1", "g2"}}

func kinds(r Report) string {
	var ks []string
	for _, a := range r.Anomalies {
		ks = append(ks, a.Kind)
	}
	return strings.Join(ks, ",")
}

func TestCleanHistoryPasses(t *testing.T) {
	r := clean().Check(both)
	if !r.OK() {
		t.Fatalf("anomalies in a clean history: %v", r.Anomalies)
	}
	fr := r.Families[0]
	if fr.Sent != 10 || fr.Acked != 10 || fr.Delivered != 20 || len(fr.Duplicates) != 0 || len(fr.Reordered) != 0 || fr.StoredTwice != 0 {
		t.Errorf("counts of a clean history: %+v", fr)
	}
	if fr.LongestUnavailable != 100*time.Millisecond {
		t.Errorf("longest gap %v, want 100ms (one acknowledgement every 100 ms)", fr.LongestUnavailable)
	}
	if h := clean(); h.Delivered("f", "g1", "g2") != 0 || h.Acked("f") != 10 {
		t.Errorf("Delivered %d, Acked %d", h.Delivered("f", "g1", "g2"), h.Acked("f"))
	}
}

// Each anomaly, added to a clean history, is found, and only it.
func TestEachAnomalyIsFound(t *testing.T) {
	cases := []struct {
		name string
		edit func(h *History)
		want string
	}{
		{"lost: acked, never delivered to one group", func(h *History) {
			h.AddSend(Send{Family: "f", ID: "x", Sum: Checksum(Body("x", nil)), Start: at(2000), End: at(2010), Acked: true, Queue: "q0", Offset: 5})
			h.AddDelivery("f", "g1", "q0", 5, Body("x", nil), at(2020))
		}, "lost"},
		{"conflict: two ids delivered at one offset", func(h *History) {
			h.AddSend(Send{Family: "f", ID: "y", Sum: Checksum(Body("y", nil)), Start: at(2000), End: at(2010), Err: "timeout", Offset: -1})
			h.AddDelivery("f", "g2", "q1", 2, Body("y", nil), at(2020)) // q1 offset 2 holds m05
		}, "conflict"},
		{"conflict: acknowledged at an offset another id holds", func(h *History) {
			h.AddSend(Send{Family: "f", ID: "z", Sum: Checksum(Body("z", nil)), Start: at(2000), End: at(2010), Acked: true, Queue: "q0", Offset: 1})
			for _, g := range []string{"g1", "g2"} {
				h.AddDelivery("f", g, "q0", 7, Body("z", nil), at(2020))
			}
		}, "conflict,misplaced,misplaced"}, // misplaced for each group
		{"phantom: delivered, never sent", func(h *History) {
			h.AddDelivery("f", "g1", "q0", 9, Body("ghost", nil), at(2020))
		}, "phantom"},
		{"phantom: a body naming no id", func(h *History) {
			h.AddDelivery("f", "g1", "q0", 9, []byte("no separator"), at(2020))
		}, "phantom"},
		{"corrupt: the body differs from the one sent", func(h *History) {
			h.AddDelivery("f", "g1", "q0", 0, Body("m00", []byte("paylaod")), at(2020))
		}, "corrupt"},
		{"misplaced: delivered at another offset than acknowledged", func(h *History) {
			h.AddSend(Send{Family: "f", ID: "w", Sum: Checksum(Body("w", nil)), Start: at(2000), End: at(2010), Acked: true, Queue: "q0", Offset: 8})
			for _, g := range []string{"g1", "g2"} {
				h.AddDelivery("f", g, "q0", 9, Body("w", nil), at(2020))
			}
		}, "misplaced,misplaced"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := clean()
			c.edit(h)
			r := h.Check(both)
			if got := kinds(r); got != c.want {
				t.Fatalf("anomalies %q, want %q: %v", got, c.want, r.Anomalies)
			}
		})
	}
}

// Duplicates, reorderings and sends stored twice are counted, not
// anomalies; an unacknowledged send that is not delivered is no loss.
func TestCountsAreNotAnomalies(t *testing.T) {
	h := clean()
	h.AddDelivery("f", "g1", "q0", 0, Body("m00", []byte("payload")), at(3000)) // redelivered: duplicate and a rewind
	// Sent once, unacknowledged (a timeout), stored twice by the
	// client's retry, delivered from both.
	b := Body("r", nil)
	h.AddSend(Send{Family: "f", ID: "r", Sum: Checksum(b), Start: at(3000), End: at(6000), Err: "timeout", Offset: -1})
	h.AddDelivery("f", "g2", "q1", 10, b, at(6100))
	h.AddDelivery("f", "g2", "q1", 11, b, at(6100))
	h.AddSend(Send{Family: "f", ID: "never", Sum: 1, Start: at(3000), End: at(6000), Err: "refused", Offset: -1})
	r := h.Check(both)
	if !r.OK() {
		t.Fatalf("anomalies: %v", r.Anomalies)
	}
	fr := r.Families[0]
	if fr.Duplicates["g1"] != 1 || fr.Duplicates["g2"] != 1 || fr.Reordered["g1"] != 1 || fr.StoredTwice != 1 || fr.Unacked != 2 {
		t.Errorf("duplicates %v, reordered %v, stored twice %d, unacked %d", fr.Duplicates, fr.Reordered, fr.StoredTwice, fr.Unacked)
	}
}

// Availability: the longest gap between acknowledgements and the time
// from each fault to the first acknowledgement of a send after it.
func TestAvailability(t *testing.T) {
	h := &History{}
	send := func(id string, start, end int, acked bool) {
		h.AddSend(Send{Family: "f", ID: id, Start: at(start), End: at(end), Acked: acked, Offset: -1})
	}
	send("a", 0, 10, true)
	send("b", 20, 30, true)
	f := h.AddFault("kill", at(40))
	send("c", 35, 3035, false) // started before the fault: does not count for it
	send("d", 3040, 4500, true)
	h.Healed(f, at(4000))
	h.AddFault("never recovered", at(5000))
	send("e", 5000, 9000, false)
	r := h.Check(Expect{Family: "f"})
	fr := r.Families[0]
	if fr.LongestUnavailable != 4500*time.Millisecond || !fr.LongestUnavailableSince.Equal(at(4500)) {
		t.Errorf("longest unavailable %v since %v, want 4.5s from the last ack to the end", fr.LongestUnavailable, fr.LongestUnavailableSince)
	}
	if len(fr.PerFault) != 2 || fr.PerFault[0] != 4460*time.Millisecond || fr.PerFault[1] != -1 {
		t.Errorf("per fault %v, want [4.46s -1]", fr.PerFault)
	}
	if len(fr.FaultFailures) != 2 || fr.FaultFailures[0] != 0 || fr.FaultFailures[1] != 1 {
		t.Errorf("failed sends per fault %v, want [0 1] (a send started before a fault is not its)", fr.FaultFailures)
	}
	var lines []string
	r.Log(func(f string, a ...any) { lines = append(lines, fmt.Sprintf(f, a...)) })
	if len(lines) != 3 || !strings.Contains(lines[2], "no acknowledged send started after it") {
		t.Errorf("log lines: %q", lines)
	}
}
