package console

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/admin"
)

// sendLater waits for the clock to pass the newest stored message's
// millisecond, then sends bodies to alternating queues; it returns a time
// before the first of them and after everything stored earlier.
func (c *cluster) sendLater(topic string, bodies ...string) time.Time {
	c.t.Helper()
	ctx := context.Background()
	seen := time.Now()
	waitFor(c.t, "the clock to tick", func() bool { return time.Now().UnixMilli() > seen.UnixMilli() })
	from := time.Now()
	for i, b := range bodies {
		if _, err := c.admin.Send(ctx, admin.SendSpec{Topic: topic, Tags: "late", Body: []byte(b), QueueID: int32(i % 2)}); err != nil {
			c.t.Fatal(err)
		}
	}
	return from
}

func TestAPIBrowseByTime(t *testing.T) {
	c := startCluster(t, false)
	f := c.seed()
	from := c.sendLater(f.topic, "late-1", "late-2", "late-3")
	waitFor(t, "dispatch", func() bool { return c.st.MaxOffset(f.topic, 0) == 6 && c.st.MaxOffset(f.topic, 1) == 1 })
	path := "/api/topics/" + f.topic + "/messages?from=" + strconv.FormatInt(from.UnixMilli(), 10)
	var ms []admin.Message
	c.getJSON(path, 200, &ms)
	if len(ms) != 3 {
		t.Fatalf("%d messages from %v, want the 3 sent after it: %+v", len(ms), from, ms)
	}
	for i, m := range ms {
		if m.BodyText != "late-"+strconv.Itoa(i+1) || m.StoreTime.Before(from.Truncate(time.Millisecond)) {
			t.Errorf("message %d: %q stored %v (from %v)", i, m.BodyText, m.StoreTime, from)
		}
		if i > 0 && m.StoreTime.Before(ms[i-1].StoreTime) {
			t.Errorf("not in store-time order: %v after %v", m.StoreTime, ms[i-1].StoreTime)
		}
	}
	if ms[0].QueueID == ms[1].QueueID {
		t.Errorf("the browse did not merge the queues: %+v", ms)
	}
	c.getJSON(path+"&limit=2", 200, &ms)
	if len(ms) != 2 || ms[1].BodyText != "late-2" {
		t.Errorf("limit 2: %+v", ms)
	}
	// From the beginning: everything, the seed's first.
	c.getJSON("/api/topics/"+f.topic+"/messages?from=0", 200, &ms)
	if len(ms) != 7 || ms[0].MsgID != f.sent[0].MsgID {
		t.Errorf("from 0: %d messages, first %+v", len(ms), ms)
	}
	c.getJSON("/api/topics/"+f.topic+"/messages", 400, nil)
	c.getJSON("/api/topics/"+f.topic+"/messages?from=0&limit=100000", 400, nil)
	var nf map[string]string
	c.getJSON("/api/topics/Nope/messages?from=0", 404, &nf)
	if nf["error"] != `There is no topic named "Nope" on any broker of this cluster.` {
		t.Errorf("missing topic: %q", nf["error"])
	}
}
