package replication

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/heapwatch"
	"github.com/keelmq/keel/internal/store"
	"github.com/keelmq/keel/internal/vfs"
)

// TestHostileHellosUnderLoad: 200 connections at once keep opening the
// master's replication port with a HELLO that announces the most the
// master reads (1 MiB) and sends five bytes of it, until the master's
// idle timeout closes them, while a slave replicates every put of a
// SYNC_MASTER (each acknowledged only once the slave flushed it). Each
// such connection costs the master its read buffer and a 16 KiB chunk,
// where it used to cost the announced MiB at once; the peak heap stays
// within a bound of 192 KiB per hostile connection (it reached 412 MiB
// with the frame allocated at its announced length, 33-37 MiB since).
func TestHostileHellosUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("opens thousands of connections")
	}
	p := startMaster(t, vfs.NewMem(), 2)
	defer p.stopMaster()
	p.startSlave(t, vfs.NewMem())
	defer p.stopSlave()
	waitUntil(t, "slave in sync", func() bool { return p.m.InSync() == 2 })
	put := func(body string) int64 {
		t.Helper()
		m := msg("T", body)
		if r := p.master.PutMessage(context.Background(), m); r.Status != store.PutOK {
			t.Fatalf("put %s: %v %v", body, r.Status, r.Err)
		}
		return m.PhysOffset + int64(m.StoredSize()) + 4
	}
	put("warm-up")

	const conns = 200
	hostile := binary.BigEndian.AppendUint32(nil, 1<<20)
	hostile = append(hostile, typeHello, 0, protocolVersion, 0, 1)
	base := heapwatch.Now()
	stopWatch := heapwatch.Watch()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var rounds atomic.Int64
	for range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				nc, err := net.Dial("tcp", p.addr)
				if err != nil {
					continue
				}
				nc.SetDeadline(time.Now().Add(10 * time.Second))
				if _, err := nc.Write(hostile); err == nil {
					io.Copy(io.Discard, nc) // until the master gives up on it
					rounds.Add(1)
				}
				nc.Close()
			}
		}()
	}
	var end int64
	for i := range 50 {
		end = put(fmt.Sprintf("m%d-%0200d", i, i))
		if f := p.slave.Offset(store.Flushed); f < end {
			t.Fatalf("put acknowledged at %d, slave flushed only %d", end, f)
		}
	}
	waitUntil(t, "three rounds of hostile connections", func() bool { return rounds.Load() >= 3*conns })
	close(stop)
	wg.Wait()
	peak := stopWatch()
	// Live per hostile connection: the master's 64 KiB read buffer, the
	// frame's first 16 KiB chunk, and the connection's other state, for
	// which 192 KiB in all leaves room. The collector lets the heap grow
	// to twice what was live at the last collection before it collects
	// again (GOGC=100).
	bound := 2 * (base + conns*192<<10)
	t.Logf("heap %d MiB before, peak %d MiB under %d hostile connections, %d in all (bound %d MiB)",
		base>>20, peak>>20, conns, rounds.Load(), bound>>20)
	if peak > bound {
		t.Fatalf("peak heap %d MiB, above the bound of %d MiB (%d MiB before the attack)", peak>>20, bound>>20, base>>20)
	}
}
