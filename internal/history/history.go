// Package history records what clients saw while faults were injected
// into a cluster (every send with whether it was acknowledged, every
// delivery with where it came from) and checks the record against the
// promises: no acknowledged message lost, no two messages at one queue
// offset, nothing corrupt or phantom delivered; it counts duplicates and
// reorderings and measures availability around each fault.
//
// A message is identified by an id of the test's choosing; its body is
// Body(id, payload), which carries the id, so a delivery names the
// message it claims to be and its checksum tells whether the bytes are
// the ones sent. Families ("rocketmq", "kafka", ...) are checked apart:
// a delivery of one family is matched with the sends of that family.
//
// A History is safe for concurrent use; Check reads a snapshot. Only
// tests import it.
package history

import (
	"bytes"
	"fmt"
	"hash/crc32"
	"slices"
	"strings"
	"sync"
	"time"
)

// Send is one send a client attempted.
type Send struct {
	Family     string
	ID         string
	Sum        uint32 // Checksum of the body sent
	Start, End time.Time
	Acked      bool
	Err        string // why not acknowledged ("" when acked)
	// Queue and Offset are where the acknowledgement said the message
	// is ("" and -1 when it did not say).
	Queue  string
	Offset int64
}

// Delivery is one message a consumer received.
type Delivery struct {
	Family string
	Group  string // the consumer group (every group must get every acked id)
	ID     string // parsed from the body; "" when the body carries none
	Queue  string
	Offset int64
	Sum    uint32 // Checksum of the body received
	At     time.Time
}

// Fault is one injected fault.
type Fault struct {
	Name     string
	At, Heal time.Time // Heal: zero when the fault heals by itself (a kill)
}

// History is the record of a run.
type History struct {
	mu         sync.Mutex
	sends      []Send
	deliveries []Delivery
	faults     []Fault
}

// Checksum is the checksum of a body (CRC32-C).
func Checksum(body []byte) uint32 { return crc32.Checksum(body, crc32.MakeTable(crc32.Castagnoli)) }

// Body is the body of message id: the id, a separator and payload.
func Body(id string, payload []byte) []byte {
	b := make([]byte, 0, len(id)+1+len(payload))
	b = append(b, id...)
	b = append(b, '|')
	return append(b, payload...)
}

// IDOf is the id a body names ("" when it names none).
func IDOf(body []byte) string {
	i := bytes.IndexByte(body, '|')
	if i <= 0 {
		return ""
	}
	return string(body[:i])
}

// AddSend records a send.
func (h *History) AddSend(s Send) {
	h.mu.Lock()
	h.sends = append(h.sends, s)
	h.mu.Unlock()
}

// AddDelivery records a delivery of body.
func (h *History) AddDelivery(family, group, queue string, offset int64, body []byte, at time.Time) {
	d := Delivery{Family: family, Group: group, ID: IDOf(body), Queue: queue, Offset: offset, Sum: Checksum(body), At: at}
	h.mu.Lock()
	h.deliveries = append(h.deliveries, d)
	h.mu.Unlock()
}

// AddFault records a fault injected at; it returns its index for Healed.
func (h *History) AddFault(name string, at time.Time) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.faults = append(h.faults, Fault{Name: name, At: at})
	return len(h.faults) - 1
}

// Healed records when fault i was healed.
func (h *History) Healed(i int, at time.Time) {
	h.mu.Lock()
	h.faults[i].Heal = at
	h.mu.Unlock()
}

// Delivered reports whether every acknowledged send of family reached
// every group in groups (a condition to wait for before Check).
func (h *History) Delivered(family string, groups ...string) (missing int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	got := map[[2]string]bool{}
	for _, d := range h.deliveries {
		if d.Family == family {
			got[[2]string{d.Group, d.ID}] = true
		}
	}
	for _, s := range h.sends {
		if s.Family != family || !s.Acked {
			continue
		}
		for _, g := range groups {
			if !got[[2]string{g, s.ID}] {
				missing++
			}
		}
	}
	return missing
}

// Sends are the sends of family recorded so far.
func (h *History) Sends(family string) []Send {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []Send
	for _, s := range h.sends {
		if s.Family == family {
			out = append(out, s)
		}
	}
	return out
}

// Deliveries are the deliveries of family to group recorded so far.
func (h *History) Deliveries(family, group string) []Delivery {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []Delivery
	for _, d := range h.deliveries {
		if d.Family == family && d.Group == group {
			out = append(out, d)
		}
	}
	return out
}

// Acked is the number of acknowledged sends of family.
func (h *History) Acked(family string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, s := range h.sends {
		if s.Family == family && s.Acked {
			n++
		}
	}
	return n
}

// Expect names a family and the consumer groups that must each receive
// every acknowledged message of it.
type Expect struct {
	Family string
	Groups []string
}

// Anomaly is one broken promise.
type Anomaly struct {
	Kind   string // "lost", "conflict", "phantom", "corrupt", "misplaced"
	Family string
	Detail string
}

func (a Anomaly) String() string { return a.Kind + " (" + a.Family + "): " + a.Detail }

// FamilyReport is what the check found for one family.
type FamilyReport struct {
	Family                  string
	Sent, Acked, Unacked    int
	Delivered               int            // deliveries, all groups
	Duplicates              map[string]int // per group: deliveries of an id it had received before
	Reordered               map[string]int // per group: deliveries at a lower offset of a queue than one it received before
	StoredTwice             int            // ids delivered from more than one queue offset (a send stored twice)
	LongestUnavailable      time.Duration  // the longest time without an acknowledged send
	LongestUnavailableSince time.Time
	// PerFault is, per fault, the time from it to the first
	// acknowledgement of a send started after it (-1: none).
	PerFault []time.Duration
	// FaultErrors is, per fault, the distinct errors (at most four) of
	// the sends that started after it and failed before that first
	// acknowledgement, and FaultFailures how many failed.
	FaultErrors   [][]string
	FaultFailures []int
}

// Report is the result of Check.
type Report struct {
	Anomalies []Anomaly
	Families  []FamilyReport
	Faults    []Fault
}

// OK reports whether no promise was broken (duplicates and reorderings
// are counted, not anomalies).
func (r Report) OK() bool { return len(r.Anomalies) == 0 }

// Check checks h: every acknowledged send of each expected family was
// delivered to each of its groups ("lost" otherwise); no queue offset of
// a family holds two ids, in the acknowledgements and deliveries of all
// its groups together ("conflict"); no delivery names an id never sent
// ("phantom") or carries bytes other than those sent ("corrupt"); an
// acknowledged send delivered at another queue offset than its
// acknowledgement named ("misplaced").
func (h *History) Check(expect ...Expect) Report {
	h.mu.Lock()
	sends := slices.Clone(h.sends)
	deliveries := slices.Clone(h.deliveries)
	faults := slices.Clone(h.faults)
	h.mu.Unlock()
	var r Report
	r.Faults = faults
	add := func(kind, family, format string, args ...any) {
		r.Anomalies = append(r.Anomalies, Anomaly{Kind: kind, Family: family, Detail: fmt.Sprintf(format, args...)})
	}
	for _, e := range expect {
		fr := FamilyReport{Family: e.Family, Duplicates: map[string]int{}, Reordered: map[string]int{}}
		sent := map[string][]Send{} // by id (an id may be sent more than once: retries by the test)
		type pos struct {
			queue  string
			offset int64
		}
		holder := map[pos]string{} // queue offset -> id
		claim := func(p pos, id, what string) {
			if p.offset < 0 || p.queue == "" {
				return
			}
			if prev, ok := holder[p]; ok && prev != id {
				add("conflict", e.Family, "queue %s offset %d holds %s and %s (%s)", p.queue, p.offset, prev, id, what)
				return
			}
			holder[p] = id
		}
		var acks []Send
		for _, s := range sends {
			if s.Family != e.Family {
				continue
			}
			fr.Sent++
			sent[s.ID] = append(sent[s.ID], s)
			if s.Acked {
				fr.Acked++
				acks = append(acks, s)
				claim(pos{s.Queue, s.Offset}, s.ID, "acknowledged")
			} else {
				fr.Unacked++
			}
		}
		got := map[string]map[string][]Delivery{} // group -> id -> deliveries
		for _, g := range e.Groups {
			got[g] = map[string][]Delivery{}
		}
		maxOff := map[[2]string]int64{} // (group, queue) -> highest offset delivered
		for _, d := range deliveries {
			if d.Family != e.Family {
				continue
			}
			fr.Delivered++
			ss, ok := sent[d.ID]
			if !ok {
				add("phantom", e.Family, "group %s got %q at queue %s offset %d, never sent", d.Group, d.ID, d.Queue, d.Offset)
				continue
			}
			if !slices.ContainsFunc(ss, func(s Send) bool { return s.Sum == d.Sum }) {
				add("corrupt", e.Family, "group %s got %s at queue %s offset %d with checksum %08x, sent as %08x", d.Group, d.ID, d.Queue, d.Offset, d.Sum, ss[0].Sum)
				continue
			}
			claim(pos{d.Queue, d.Offset}, d.ID, "delivered to "+d.Group)
			if got[d.Group] == nil {
				got[d.Group] = map[string][]Delivery{}
			}
			if len(got[d.Group][d.ID]) > 0 {
				fr.Duplicates[d.Group]++
			}
			got[d.Group][d.ID] = append(got[d.Group][d.ID], d)
			k := [2]string{d.Group, d.Queue}
			if m, ok := maxOff[k]; ok && d.Offset < m {
				fr.Reordered[d.Group]++
			}
			if m, ok := maxOff[k]; !ok || d.Offset > m {
				maxOff[k] = d.Offset
			}
		}
		places := map[string]map[pos]bool{}
		for p, id := range holder {
			if places[id] == nil {
				places[id] = map[pos]bool{}
			}
			places[id][p] = true
		}
		for _, ps := range places {
			if len(ps) > 1 {
				fr.StoredTwice++
			}
		}
		for _, s := range acks {
			for _, g := range e.Groups {
				ds := got[g][s.ID]
				if len(ds) == 0 {
					add("lost", e.Family, "%s acknowledged at %s (queue %s offset %d) never reached group %s", s.ID, s.End.Format("15:04:05.000"), s.Queue, s.Offset, g)
					continue
				}
				if s.Offset >= 0 && s.Queue != "" && !slices.ContainsFunc(ds, func(d Delivery) bool { return d.Queue == s.Queue && d.Offset == s.Offset }) {
					add("misplaced", e.Family, "%s acknowledged at queue %s offset %d reached group %s only at queue %s offset %d", s.ID, s.Queue, s.Offset, g, ds[0].Queue, ds[0].Offset)
				}
			}
		}
		availability(&fr, sends, faults)
		r.Families = append(r.Families, fr)
	}
	slices.SortStableFunc(r.Anomalies, func(a, b Anomaly) int { return strings.Compare(a.Kind, b.Kind) })
	return r
}

// availability fills the availability figures of fr from the family's
// sends: the longest gap between consecutive acknowledgements (from the
// first send to the last acknowledgement or send), and per fault the
// time to the first acknowledgement of a send started after it.
func availability(fr *FamilyReport, sends []Send, faults []Fault) {
	var ends []time.Time
	var first, last time.Time
	for _, s := range sends {
		if s.Family != fr.Family {
			continue
		}
		if first.IsZero() || s.Start.Before(first) {
			first = s.Start
		}
		if s.End.After(last) {
			last = s.End
		}
		if s.Acked {
			ends = append(ends, s.End)
		}
	}
	slices.SortFunc(ends, func(a, b time.Time) int { return a.Compare(b) })
	prev := first
	for _, e := range append(ends, last) {
		if gap := e.Sub(prev); gap > fr.LongestUnavailable {
			fr.LongestUnavailable, fr.LongestUnavailableSince = gap, prev
		}
		prev = e
	}
	for _, f := range faults {
		best := time.Duration(-1)
		for _, s := range sends {
			if s.Family == fr.Family && s.Acked && !s.Start.Before(f.At) {
				if d := s.End.Sub(f.At); best < 0 || d < best {
					best = d
				}
			}
		}
		fr.PerFault = append(fr.PerFault, best)
		var errs []string
		n := 0
		for _, s := range sends {
			if s.Family != fr.Family || s.Acked || s.Start.Before(f.At) || best >= 0 && s.End.After(f.At.Add(best)) {
				continue
			}
			n++
			if e := s.Err; len(errs) < 4 && !slices.Contains(errs, e) {
				errs = append(errs, e)
			}
		}
		fr.FaultErrors, fr.FaultFailures = append(fr.FaultErrors, errs), append(fr.FaultFailures, n)
	}
}

// Log writes the report with logf (t.Logf): anomalies, then per family
// the counts and availability figures.
func (r Report) Log(logf func(string, ...any)) {
	for _, a := range r.Anomalies {
		logf("ANOMALY %s", a)
	}
	for _, fr := range r.Families {
		logf("%s: %d sent, %d acknowledged, %d not; %d deliveries; duplicates %v; reordered %v; %d stored twice; longest without an acknowledged send %v (from %s)",
			fr.Family, fr.Sent, fr.Acked, fr.Unacked, fr.Delivered, fr.Duplicates, fr.Reordered, fr.StoredTwice,
			fr.LongestUnavailable.Round(time.Millisecond), fr.LongestUnavailableSince.Format("15:04:05.000"))
		for i, d := range fr.PerFault {
			f := r.Faults[i]
			if d < 0 {
				logf("%s: fault %d (%s at %s): no acknowledged send started after it", fr.Family, i, f.Name, f.At.Format("15:04:05.000"))
				continue
			}
			logf("%s: fault %d (%s at %s): first acknowledgement of a send started after it %v later (%d failed before it: %q)", fr.Family, i, f.Name,
				f.At.Format("15:04:05.000"), d.Round(time.Millisecond), fr.FaultFailures[i], fr.FaultErrors[i])
		}
	}
}
