package kafka

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/vfs"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/plain"
)

func quotaNode(t *testing.T, fs *vfs.MemFS) *testNode {
	t.Helper()
	return startNodeWith(t, fs, Config{DataDir: "/data", FS: fs})
}

func setQuota(t *testing.T, adm *kadm.Client, entity kadm.ClientQuotaEntity, key string, v float64) {
	t.Helper()
	rs, err := adm.AlterClientQuotas(ctx30(t), []kadm.AlterClientQuotaEntry{{Entity: entity, Ops: []kadm.AlterClientQuotaOp{{Key: key, Value: v}}}})
	if err != nil || len(rs) != 1 || rs[0].Err != nil {
		t.Fatalf("set %s %v: %v %+v", key, entity, err, rs)
	}
}

func clientEntity(name *string) kadm.ClientQuotaEntity {
	return kadm.ClientQuotaEntity{{Type: "client-id", Name: name}}
}

// TestKadmClientQuotas: kadm sets, describes (all, exact, default,
// strict) and removes byte-rate quotas; what Keel does not honour is
// refused per entry; the quotas are read again after a restart.
func TestKadmClientQuotas(t *testing.T) {
	fs := vfs.NewMem()
	n := quotaNode(t, fs)
	_, adm := adminClient(t, n.addr)
	ctx := ctx30(t)
	alice, slow := "alice01", "slow"
	setQuota(t, adm, clientEntity(&slow), quotaProduce, 262144)
	setQuota(t, adm, kadm.ClientQuotaEntity{{Type: "user", Name: &alice}, {Type: "client-id"}}, quotaFetch, 1e6)
	setQuota(t, adm, kadm.ClientQuotaEntity{{Type: "user"}}, quotaProduce, 5e6)

	rs, err := adm.AlterClientQuotas(ctx, []kadm.AlterClientQuotaEntry{
		{Entity: kadm.ClientQuotaEntity{{Type: "ip", Name: &alice}}, Ops: []kadm.AlterClientQuotaOp{{Key: "connection_creation_rate", Value: 5}}},
		{Entity: clientEntity(&slow), Ops: []kadm.AlterClientQuotaOp{{Key: "request_percentage", Value: 50}}},
		{Entity: clientEntity(&slow), Ops: []kadm.AlterClientQuotaOp{{Key: quotaFetch, Value: 0}}},
		{Entity: kadm.ClientQuotaEntity{}, Ops: []kadm.AlterClientQuotaOp{{Key: quotaFetch, Value: 10}}},
	})
	if err != nil || len(rs) != 4 {
		t.Fatalf("refusals: %v %+v", err, rs)
	}
	for i, r := range rs {
		if !errors.Is(r.Err, kerr.InvalidRequest) || r.ErrMessage == "" {
			t.Fatalf("refusal %d: %+v", i, r)
		}
	}

	check := func(adm *kadm.Client) {
		t.Helper()
		all, err := adm.DescribeClientQuotas(ctx, false, nil)
		if err != nil || len(all) != 3 {
			t.Fatalf("describe all: %v %+v", err, all)
		}
		got, err := adm.DescribeClientQuotas(ctx, false, []kadm.DescribeClientQuotaComponent{{Type: "client-id", MatchName: &slow, MatchType: 0}})
		if err != nil || len(got) != 1 || len(got[0].Values) != 1 || got[0].Values[0] != (kadm.ClientQuotaValue{Key: quotaProduce, Value: 262144}) {
			t.Fatalf("describe client-id=slow: %v %+v", err, got)
		}
		got, err = adm.DescribeClientQuotas(ctx, false, []kadm.DescribeClientQuotaComponent{{Type: "client-id", MatchType: 1}})
		if err != nil || len(got) != 1 || len(got[0].Entity) != 2 || got[0].Values[0].Key != quotaFetch {
			t.Fatalf("describe client-id default: %v %+v", err, got)
		}
		got, err = adm.DescribeClientQuotas(ctx, true, []kadm.DescribeClientQuotaComponent{{Type: "user", MatchType: 2}})
		if err != nil || len(got) != 1 || got[0].Entity[0].Name != nil || got[0].Values[0].Value != 5e6 {
			t.Fatalf("describe strict any user: %v %+v", err, got)
		}
	}
	check(adm)

	n.stop()
	n = quotaNode(t, fs)
	_, adm = adminClient(t, n.addr)
	check(adm)

	rs, err = adm.AlterClientQuotas(ctx, []kadm.AlterClientQuotaEntry{{Entity: clientEntity(&slow), Ops: []kadm.AlterClientQuotaOp{{Key: quotaProduce, Remove: true}}}})
	if err != nil || rs[0].Err != nil {
		t.Fatalf("remove: %v %+v", err, rs)
	}
	if got, err := adm.DescribeClientQuotas(ctx, false, []kadm.DescribeClientQuotaComponent{{Type: "client-id", MatchName: &slow}}); err != nil || len(got) != 0 {
		t.Fatalf("after the removal: %v %+v", err, got)
	}
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// throttleLog records what the broker reports in throttle_time_ms.
type throttleLog struct {
	mu     sync.Mutex
	max    time.Duration
	n      int
	freeAt time.Time // the latest time a reported throttle ends
}

func (l *throttleLog) OnBrokerThrottle(_ kgo.BrokerMetadata, d time.Duration, _ bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.n++
	l.max = max(l.max, d)
	if end := time.Now().Add(d); end.After(l.freeAt) {
		l.freeAt = end
	}
}

// TestProduceQuotaThrottles: a producer over its client id's
// producer_byte_rate is told to wait (throttle_time_ms > 0), and what the
// broker reports bounds its rate: the bytes produced, at the quota,
// take no longer than the time until the last reported throttle ends
// plus the one second burst. A client id without a quota is never
// throttled.
func TestProduceQuotaThrottles(t *testing.T) {
	n := quotaNode(t, vfs.NewMem())
	_, adm := adminClient(t, n.addr)
	ctx := ctx30(t)
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, "metered"); err != nil {
		t.Fatal(err)
	}
	const rate = 512 << 10
	slow := "slow"
	setQuota(t, adm, clientEntity(&slow), quotaProduce, rate)

	produce := func(clientID string, total int) (*throttleLog, time.Time, int) {
		log := &throttleLog{}
		cl, err := kgo.NewClient(kgo.SeedBrokers(n.addr), kgo.ClientID(clientID), kgo.WithHooks(log),
			kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0), kgo.ProducerBatchCompression(kgo.NoCompression()))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		value := bytes.Repeat([]byte("q"), 16<<10)
		start, sent := time.Now(), 0
		for sent < total {
			var rs []*kgo.Record
			for range 8 {
				rs = append(rs, &kgo.Record{Topic: "metered", Partition: 0, Value: value})
				sent += len(value)
			}
			if err := cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
		return log, start, sent
	}

	log, start, sent := produce("slow", 3<<20/2)
	end := time.Now()
	if log.n == 0 || log.max <= 0 {
		t.Fatalf("no throttle reported producing %d bytes at %d B/s", sent, rate)
	}
	atQuota := time.Duration(float64(sent) / rate * float64(time.Second))
	released := later(end, log.freeAt)
	if released.Sub(start)+quotaBurst < atQuota {
		t.Fatalf("%d bytes at %d B/s take %v, the broker's throttles release the producer after %v (+%v burst)", sent, rate, atQuota, released.Sub(start), quotaBurst)
	}
	t.Logf("%d bytes, quota %d B/s: %d throttled responses, largest %v", sent, rate, log.n, log.max)

	if free, _, _ := produce("free", 3<<20/2); free.n != 0 {
		t.Fatalf("a client id without a quota was throttled %d times", free.n)
	}
}

// TestFetchQuotaThrottles: a consumer over its consumer_byte_rate (a
// default user quota) is throttled the same way.
func TestFetchQuotaThrottles(t *testing.T) {
	n := quotaNode(t, vfs.NewMem())
	cl, err := kgo.NewClient(kgo.SeedBrokers(n.addr), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerBatchCompression(kgo.NoCompression()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx := ctx30(t)
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, "metered"); err != nil {
		t.Fatal(err)
	}
	value := bytes.Repeat([]byte("f"), 16<<10)
	total := 0
	for range 12 {
		var rs []*kgo.Record
		for range 8 {
			rs = append(rs, &kgo.Record{Topic: "metered", Partition: 0, Value: value})
			total += len(value)
		}
		if err := cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	const rate = 512 << 10
	setQuota(t, adm, kadm.ClientQuotaEntity{{Type: "user"}}, quotaFetch, rate) // ANONYMOUS gets its own

	log := &throttleLog{}
	cons, err := kgo.NewClient(kgo.ClientID("reader"), kgo.SeedBrokers(n.addr), kgo.WithHooks(log), kgo.FetchMaxBytes(256<<10), kgo.FetchMaxPartitionBytes(256<<10),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"metered": {0: kgo.NewOffset().AtStart()}}))
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	start, got := time.Now(), 0
	for got < total {
		fctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		fs := cons.PollFetches(fctx)
		cancel()
		if err := fs.Err(); err != nil {
			t.Fatal(err)
		}
		fs.EachRecord(func(r *kgo.Record) { got += len(r.Value) })
	}
	end := time.Now()
	if log.n == 0 {
		t.Fatalf("no throttle reported fetching %d bytes at %d B/s", got, rate)
	}
	atQuota := time.Duration(float64(got) / rate * float64(time.Second))
	if released := later(end, log.freeAt); released.Sub(start)+quotaBurst < atQuota {
		t.Fatalf("%d bytes at %d B/s take %v, the broker's throttles release the consumer after %v", got, rate, atQuota, released.Sub(start))
	}
}

// TestQuotaAppliesAfterRestart: a quota read back at start throttles.
func TestQuotaAppliesAfterRestart(t *testing.T) {
	fs := vfs.NewMem()
	n := quotaNode(t, fs)
	_, adm := adminClient(t, n.addr)
	slow := "slow"
	setQuota(t, adm, clientEntity(&slow), quotaProduce, 64<<10)
	if _, err := adm.CreateTopic(ctx30(t), 1, 1, nil, "metered"); err != nil {
		t.Fatal(err)
	}
	n.stop()
	n = quotaNode(t, fs)
	log := &throttleLog{}
	cl, err := kgo.NewClient(kgo.SeedBrokers(n.addr), kgo.ClientID("slow"), kgo.WithHooks(log), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerBatchCompression(kgo.NoCompression()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	r := &kgo.Record{Topic: "metered", Partition: 0, Value: bytes.Repeat([]byte("r"), 128<<10)}
	if err := cl.ProduceSync(ctx30(t), r).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if log.n == 0 || log.max < 500*time.Millisecond {
		t.Fatalf("128 KiB at 64 KiB/s after a restart: throttles %d, largest %v", log.n, log.max)
	}
}

// TestQuotaAPIsNeedAdmin: under access control only an admin may
// describe or alter quotas.
func TestQuotaAPIsNeedAdmin(t *testing.T) {
	n := startACLNode(t)
	ctx := ctx30(t)
	user := kadm.NewClient(saslClient(t, n.addr, plain.Auth{User: "producer1", Pass: "producer-secret"}.AsMechanism()))
	var ae *kadm.AuthError
	if _, err := user.DescribeClientQuotas(ctx, false, nil); !errors.As(err, &ae) {
		t.Fatalf("describe: %v", err)
	}
	slow := "slow"
	rs, err := user.AlterClientQuotas(ctx, []kadm.AlterClientQuotaEntry{{Entity: clientEntity(&slow), Ops: []kadm.AlterClientQuotaOp{{Key: quotaProduce, Value: 1000}}}})
	if !errors.As(err, &ae) && (len(rs) != 1 || !errors.Is(rs[0].Err, kerr.ClusterAuthorizationFailed)) {
		t.Fatalf("alter: %v %+v", err, rs)
	}
}

// TestQuotaMutesTheConnection: the broker itself holds a throttled
// connection, whatever the client does: for Produce v7 (KIP-219) the
// response comes at once and the connection's next request is not
// answered before the throttle ends; for Produce v5 the response itself
// is held that long.
func TestQuotaMutesTheConnection(t *testing.T) {
	n := quotaNode(t, vfs.NewMem())
	_, adm := adminClient(t, n.addr)
	if _, err := adm.CreateTopic(ctx30(t), 1, 1, nil, "muted"); err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", n.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	r := bufio.NewReader(c)
	client := "test" // frameOf's client id
	for i, v := range []int16{7, 5} {
		setQuota(t, adm, clientEntity(&client), quotaProduce, 50000) // a fresh meter
		corr := int32(10 * (i + 1))
		sent := time.Now()
		c.Write(frameOf(produceReq(1, "muted", bigBatch(50)), v, corr)) // 100 kB: 2 s at the quota
		body := readResponse(t, r, corr)
		answered := time.Now()
		resp := kmsg.NewPtrProduceResponse()
		resp.SetVersion(v)
		if err := resp.ReadFrom(body); err != nil {
			t.Fatal(err)
		}
		if p := resp.Topics[0].Partitions[0]; p.ErrorCode != 0 || resp.ThrottleMillis <= 0 {
			t.Fatalf("v%d: %+v, throttle %d ms", v, p, resp.ThrottleMillis)
		}
		throttle := time.Duration(resp.ThrottleMillis-1) * time.Millisecond // reported rounded up
		c.Write(frameOf(kmsg.NewPtrMetadataRequest(), 1, corr+1))
		readResponse(t, r, corr+1)
		next := time.Now()
		if v >= 6 && next.Sub(sent) < throttle {
			t.Fatalf("v%d: the next request was answered %v after the throttled one, throttle %v", v, next.Sub(sent), throttle)
		}
		if v < 6 && answered.Sub(sent) < throttle {
			t.Fatalf("v%d: the throttled response came after %v, throttle %v", v, answered.Sub(sent), throttle)
		}
	}
}

// TestQuotaMetersBounded: past maxQuotaMeters client ids, a default
// quota's new client ids share one meter rather than growing the table
// or going unmetered.
func TestQuotaMetersBounded(t *testing.T) {
	q, _ := loadQuotas(nil, "")
	q.quotas[quotaEntity{HasClient: true, ClientDefault: true}] = map[string]float64{quotaProduce: 1000}
	q.active.Store(true)
	now := time.Now()
	for i := range maxQuotaMeters + 50 {
		q.charge(quotaProduce, anonymousUser, fmt.Sprintf("c%d", i), 1000, now) // 1 s ahead each
	}
	if len(q.meters) > maxQuotaMeters+1 {
		t.Fatalf("%d meters", len(q.meters))
	}
	if d := q.charge(quotaProduce, anonymousUser, "one-more", 1000, now); d <= 0 {
		t.Fatalf("a client id past the bound is not throttled on the shared meter (%v)", d)
	}
}

// TestQuotaFileRefusedAtStart: a quotas file that does not parse stops
// the door from serving (it must not run without the quotas it was
// given), with an error naming the file.
func TestQuotaFileRefusedAtStart(t *testing.T) {
	fs := vfs.NewMem()
	if err := fs.MkdirAll("/data/config", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := vfs.WriteFileDurable(fs, "/data/config/kafkaQuotas.json", []byte(`{"version":1,"quotas":[{"entity":[{"type":"ip","name":"1.2.3.4"}],"values":{"producer_byte_rate":10}}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	n := quotaNode(t, fs)
	select {
	case err := <-n.done:
		n.done <- err // for stop
		if err == nil || !strings.Contains(err.Error(), "kafkaQuotas.json") {
			t.Fatalf("Serve: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve runs with a quotas file it cannot read")
	}
}

// TestQuotasSurvivePowerLoss: an acknowledged AlterClientQuotas is on
// disk: a power loss right after it (torn unsynced writes, several
// seeds) leaves the quota, read at the next start.
func TestQuotasSurvivePowerLoss(t *testing.T) {
	fs := vfs.NewMem()
	n := quotaNode(t, fs)
	_, adm := adminClient(t, n.addr)
	slow := "slow"
	for i := range 3 {
		setQuota(t, adm, clientEntity(&slow), quotaProduce, float64(1000*(i+1)))
		for seed := range uint64(4) {
			survived := fs.CrashCloneWith(rand.New(rand.NewPCG(seed, uint64(i))))
			m := quotaNode(t, survived)
			_, madm := adminClient(t, m.addr)
			got, err := madm.DescribeClientQuotas(ctx30(t), true, []kadm.DescribeClientQuotaComponent{{Type: "client-id", MatchName: &slow}})
			if err != nil || len(got) != 1 || got[0].Values[0].Value != float64(1000*(i+1)) {
				t.Fatalf("change %d, seed %d: after a power loss %v %+v", i, seed, err, got)
			}
			m.stop()
		}
	}
}
