package reliability

import (
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/broker"
	"github.com/keelmq/keel/internal/broker/schedule"
	"github.com/keelmq/keel/internal/remoting"
	"github.com/keelmq/keel/internal/store"
	"github.com/keelmq/keel/internal/vfs"
)

// node is an in-process broker with its store and schedule service on a
// chosen filesystem, behind a remoting server on 127.0.0.1:0.
type node struct {
	t      testing.TB
	fs     vfs.FS
	dir    string
	st     *store.Store
	svc    *schedule.Service
	b      *broker.Broker
	srv    *remoting.Server
	addr   string
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// nodeLevels are short delay levels so scheduled messages and retries fire
// within a test: level n waits n*50ms.
func nodeLevels() []time.Duration {
	lv := make([]time.Duration, 18)
	for i := range lv {
		lv[i] = time.Duration(i+1) * 50 * time.Millisecond
	}
	return lv
}

// nodeStoreConfig: small files so segments roll, frequent checkpoints.
func nodeStoreConfig(fsys vfs.FS, dir string) store.Config {
	cfg := store.DefaultConfig(dir)
	cfg.FS = fsys
	cfg.FlushDiskType = store.SyncFlush
	cfg.CommitLogSegmentBytes = 256 << 10
	cfg.MaxMessageBytes = 16 << 10
	cfg.ConsumeQueueSegmentEntries = 64
	cfg.IndexHashSlots, cfg.IndexMaxEntries = 512, 2048
	cfg.FlushConsumeQueueInterval = 20 * time.Millisecond
	cfg.TagsCode = schedule.StoreTagsCode(nodeLevels())
	return cfg
}

type nodeOptions struct {
	storeCfg  func(*store.Config)
	brokerCfg func(*broker.Config)
	server    remoting.ServerConfig
	logger    *slog.Logger                            // the broker's; nil discards
	wrap      func(remoting.Handler) remoting.Handler // around the broker's handler
}

// openNode opens store, schedule service and broker on fsys/dir; an error
// from store.Open is returned, everything else fails the test.
func openNode(t testing.TB, fsys vfs.FS, dir string, o nodeOptions) (*node, error) {
	t.Helper()
	n := &node{t: t, fs: fsys, dir: dir}
	scfg := nodeStoreConfig(fsys, dir)
	if o.storeCfg != nil {
		o.storeCfg(&scfg)
	}
	st, err := store.Open(scfg)
	if err != nil {
		return nil, err
	}
	svc, err := schedule.New(schedule.Config{Dir: dir, FS: fsys, DelayLevels: nodeLevels()}, st)
	if err != nil {
		st.Close()
		t.Fatalf("schedule.New: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := broker.DefaultConfig()
	cfg.DataDir, cfg.FS, cfg.AdvertisedAddr = dir, fsys, ln.Addr().String()
	cfg.OffsetFlushInterval = 20 * time.Millisecond
	if o.brokerCfg != nil {
		o.brokerCfg(&cfg)
	}
	b, err := broker.New(cfg, st, o.logger)
	if err != nil {
		st.Close()
		t.Fatalf("broker.New: %v", err)
	}
	b.SetScheduler(svc)
	scfgSrv := o.server
	scfgSrv.OnConnClose = b.OnConnClose
	h := b.Handler()
	if o.wrap != nil {
		h = o.wrap(h)
	}
	n.srv = remoting.NewServer(scfgSrv, h)
	go n.srv.Serve(ln)
	ctx, cancel := context.WithCancel(context.Background())
	n.wg.Add(2)
	go func() { defer n.wg.Done(); b.Run(ctx) }()
	go func() { defer n.wg.Done(); svc.Run(ctx) }()
	n.st, n.svc, n.b, n.addr, n.cancel = st, svc, b, ln.Addr().String(), cancel
	return n, nil
}

func mustOpenNode(t testing.TB, fsys vfs.FS, dir string, o nodeOptions) *node {
	t.Helper()
	n, err := openNode(t, fsys, dir, o)
	if err != nil {
		t.Fatalf("store.Open: %v", err)
	}
	t.Cleanup(func() { n.close() })
	return n
}

// close stops everything in the documented order and returns the first
// error of the broker, schedule service and store closes.
func (n *node) close() error {
	if n.b == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	n.srv.Shutdown(ctx)
	errB := n.b.Close()
	errS := n.svc.Close()
	n.cancel()
	n.wg.Wait()
	errSt := n.st.Close()
	n.b = nil
	for _, err := range []error{errB, errS, errSt} {
		if err != nil {
			return err
		}
	}
	return nil
}

// dial connects a raw remoting client to the node.
func (n *node) dial() *remoting.Client {
	n.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cl, err := remoting.Dial(ctx, n.addr, remoting.ClientConfig{})
	if err != nil {
		n.t.Fatalf("dial: %v", err)
	}
	n.t.Cleanup(func() { cl.Close() })
	return cl
}

// call invokes one request with a timeout.
func call(cl *remoting.Client, code int16, ext map[string]string, body []byte) (*remoting.Command, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return cl.Invoke(ctx, remoting.NewRequest(code, ext, body))
}

func sendExt(topic string, queue int32, props string) map[string]string {
	return map[string]string{
		"producerGroup": "pg", "topic": topic, "defaultTopic": broker.DefaultTopic, "defaultTopicQueueNums": "4",
		"queueId": strconv.Itoa(int(queue)), "sysFlag": "0", "bornTimestamp": strconv.FormatInt(time.Now().UnixMilli(), 10),
		"flag": "0", "properties": props, "reconsumeTimes": "0", "unitMode": "false", "batch": "false",
	}
}

func pullExt(group, topic string, queue int32, offset int64, max int, sysFlag int32, suspendMs int64) map[string]string {
	return map[string]string{
		"consumerGroup": group, "topic": topic, "queueId": strconv.Itoa(int(queue)),
		"queueOffset": strconv.FormatInt(offset, 10), "maxMsgNums": strconv.Itoa(max),
		"sysFlag": strconv.Itoa(int(sysFlag)), "commitOffset": "0", "suspendTimeoutMillis": strconv.FormatInt(suspendMs, 10),
		"subscription": "*", "subVersion": "0", "expressionType": "TAG",
	}
}

// Pull sysFlag bits.
const (
	flagCommitOffset int32 = 1
	flagSuspend      int32 = 2
	flagSubscription int32 = 4
)

// offsetWatchFS passes everything to its inner FS and, whenever the
// broker's consumer offset file has been replaced durably (the SyncDir
// that ends the temp-file, fsync, rename sequence returned), records the
// offsets it holds: those are the offsets "reported durable".
type offsetWatchFS struct {
	vfs.FS
	path string

	mu      sync.Mutex
	durable map[string]int64 // "topic@group/queue" -> offset
	flushes int
}

func newOffsetWatchFS(inner vfs.FS, dataDir string) *offsetWatchFS {
	return &offsetWatchFS{FS: inner, path: filepath.Join(dataDir, "config", "consumerOffset.json"), durable: map[string]int64{}}
}

func (w *offsetWatchFS) SyncDir(dir string) error {
	err := w.FS.SyncDir(dir)
	if err != nil || filepath.Clean(dir) != filepath.Dir(w.path) {
		return err
	}
	data, ok := readAll(w.FS, w.path)
	if !ok {
		return nil
	}
	var f struct {
		OffsetTable map[string]map[string]int64 `json:"offsetTable"`
	}
	if json.Unmarshal(data, &f) != nil {
		return nil
	}
	m := make(map[string]int64)
	for k, qs := range f.OffsetTable {
		for q, off := range qs {
			m[k+"/"+q] = off
		}
	}
	w.mu.Lock()
	w.durable, w.flushes = m, w.flushes+1
	w.mu.Unlock()
	return nil
}

// snapshot returns the offsets reported durable so far.
func (w *offsetWatchFS) snapshot() map[string]int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make(map[string]int64, len(w.durable))
	for k, v := range w.durable {
		out[k] = v
	}
	return out
}

func readAll(fsys vfs.FS, path string) ([]byte, bool) {
	f, err := fsys.OpenFile(path, 0, 0)
	if err != nil {
		return nil, false
	}
	defer f.Close()
	size, err := f.Size()
	if err != nil {
		return nil, false
	}
	buf := make([]byte, size)
	if n, err := f.ReadAt(buf, 0); n != len(buf) && err != nil {
		return nil, false
	}
	return buf, true
}

// offsetKey is the key offsetWatchFS uses.
func offsetKey(topic, group string, queue int32) string {
	return topic + "@" + group + "/" + strconv.Itoa(int(queue))
}

// splitOffsetKey reverses offsetKey.
func splitOffsetKey(k string) (topic, group string, queue int32) {
	tg, q, _ := strings.Cut(k, "/")
	topic, group, _ = strings.Cut(tg, "@")
	n, _ := strconv.Atoi(q)
	return topic, group, int32(n)
}
