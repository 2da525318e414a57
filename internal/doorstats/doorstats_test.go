package doorstats

import (
	"sync"
	"testing"
)

func TestCounters(t *testing.T) {
	var c Counters
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				c.Accept()
				c.Request()
				c.In(10)
				c.Out(3)
				c.Out(0)
				c.Error()
				c.Close()
			}
		}()
	}
	wg.Wait()
	c.Accept()
	got := c.Snapshot(Kafka)
	want := Snapshot{Door: Kafka, Open: 1, Accepted: 401, Requests: 400, Errors: 400, BytesIn: 4000, BytesOut: 1200}
	if got != want {
		t.Fatalf("snapshot %+v, want %+v", got, want)
	}
	var nilc *Counters
	nilc.Accept()
	nilc.In(5)
	if s := nilc.Snapshot(AMQP); s != (Snapshot{Door: AMQP}) {
		t.Fatalf("nil counters: %+v", s)
	}
}
