package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestDefaultIsValid(t *testing.T) {
	if err := Default().Validate(); err != nil {
		t.Fatalf("Default().Validate() = %v", err)
	}
	d := Default()
	if d.FlushDiskType != SyncFlush {
		t.Errorf("default flushDiskType = %s, want SYNC_FLUSH (Keel's embedded default)", d.FlushDiskType)
	}
	levels, err := d.DelayLevels()
	if err != nil || len(levels) != 18 || levels[0] != time.Second || levels[17] != 2*time.Hour {
		t.Errorf("default delay levels = %v, %v; want 18 levels 1s..2h", levels, err)
	}
}

func TestLoadRocketMQFile(t *testing.T) {
	b, unknown, err := Load("testdata/rocketmq-2m-noslave.conf")
	if err != nil {
		t.Fatal(err)
	}
	want := Default()
	want.BrokerClusterName = "OrdersCluster"
	want.BrokerName = "broker-orders-a"
	want.FileReservedTime = 48 * time.Hour
	want.FlushDiskType = AsyncFlush
	want.NamesrvAddr = "10.0.0.1:9876;10.0.0.2:9876"
	want.ListenPort = 30911
	want.StorePathRootDir = "/data/rocketmq/store"
	want.StorePathCommitLog = "/data/rocketmq/store/commitlog"
	want.CommitLogSegmentBytes = 256 << 20
	want.ConsumeQueueSegmentEntries = 300000
	want.MaxMessageBytes = 65536
	want.AutoCreateTopicEnable = false
	want.AutoCreateSubscriptionGroup = false
	want.MessageDelayLevel = DefaultMessageDelayLevel + " 1d"
	want.origin = b.origin
	if !reflect.DeepEqual(b, want) {
		t.Errorf("Load:\n got %+v\nwant %+v", b, want)
	}
	if len(unknown) != 1 || unknown[0].Key != "sendMessageThreadPoolNums" || unknown[0].Line != 18 || unknown[0].Hint == "" {
		t.Errorf("unknown = %+v, want sendMessageThreadPoolNums on line 18 with a hint", unknown)
	}
	if err := b.Validate(); err != nil {
		t.Errorf("Validate: %v", err)
	}
	if got := b.NamesrvAddrs(); !reflect.DeepEqual(got, []string{"10.0.0.1:9876", "10.0.0.2:9876"}) {
		t.Errorf("NamesrvAddrs = %q", got)
	}
}

func TestLoadKeelFile(t *testing.T) {
	b, unknown, err := Load("testdata/keel.conf")
	if err != nil || len(unknown) != 0 {
		t.Fatalf("Load: %v, unknown %v", err, unknown)
	}
	if b.BrokerName != "broker-b" || b.SyncFlushTimeout != 2500*time.Millisecond ||
		b.DiskHardLimitRatio != 85 || b.MaxFrameBytes != 8<<20 || b.HTTPListen != "" ||
		b.DuplicationWindow != 0 || b.MessageDelayLevel != "1s 5s 10s" {
		t.Errorf("Load = %+v", b)
	}
	if err := b.Validate(); err != nil {
		t.Errorf("Validate: %v", err)
	}
}

func TestLoadMissingFile(t *testing.T) {
	_, _, err := Load(filepath.Join(t.TempDir(), "nope.conf"))
	if !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Load(missing) = %v, want ErrNotExist", err)
	}
}

func TestSetValues(t *testing.T) {
	tests := []struct {
		key, value string
		check      func(b *Broker) bool
	}{
		{"brokerId", "0", func(b *Broker) bool { return b.BrokerID == 0 }},
		{"listenPort", "+10912", func(b *Broker) bool { return b.ListenPort == 10912 }},
		{"amqpListen", "", func(b *Broker) bool { return b.AMQPListen == "" }},
		{"autoCreateTopicEnable", "FALSE", func(b *Broker) bool { return !b.AutoCreateTopicEnable }},
		{"longPollingEnable", "True", func(b *Broker) bool { return b.LongPollingEnable }},
		{"fileReservedTime", "1", func(b *Broker) bool { return b.FileReservedTime == time.Hour }},
		{"transactionTimeOut", "1500", func(b *Broker) bool { return b.TransactionTimeout == 1500*time.Millisecond }},
		{"channelExpiredTimeout", "30000", func(b *Broker) bool { return b.ChannelExpiredTimeout == 30*time.Second }},
		{"duplicationWindowSeconds", "5", func(b *Broker) bool { return b.DuplicationWindow == 5*time.Second }},
		{"shortPollingTimeMills", "200", func(b *Broker) bool { return b.ShortPollingTime == 200*time.Millisecond }},
		{"mapedFileSizeConsumeQueue", "6000000", func(b *Broker) bool { return b.ConsumeQueueSegmentEntries == 300000 }},
		{"mappedFileSizeConsumeQueue", "2000", func(b *Broker) bool { return b.ConsumeQueueSegmentEntries == 100 }},
		{"mapedFileSizeConsumeQueue", "2001", func(b *Broker) bool { return b.ConsumeQueueSegmentEntries == 101 }}, // rounded up, as RocketMQ does
		{"mappedFileSizeCommitLog", "1048576", func(b *Broker) bool { return b.CommitLogSegmentBytes == 1<<20 }},
		{"diskHardLimitRatio", "80", func(b *Broker) bool { return b.DiskHardLimitRatio == 80 }},
		{"diskSpaceWarningLevelRatio", "85", func(b *Broker) bool { return b.DiskHardLimitRatio == 85 }},
		{"diskPressureDelete", "unconsumed", func(b *Broker) bool { return b.DiskPressureDelete == PressureDeleteUnconsumed }},
		{"flushDiskType", "ASYNC_FLUSH", func(b *Broker) bool { return b.FlushDiskType == AsyncFlush }},
		{"brokerName", "  spaced  ", func(b *Broker) bool { return b.BrokerName == "spaced" }},
	}
	for _, tt := range tests {
		b := Default()
		if err := b.Set(tt.key, tt.value); err != nil {
			t.Errorf("Set(%s, %q): %v", tt.key, tt.value, err)
			continue
		}
		if !tt.check(b) {
			t.Errorf("Set(%s, %q): value not applied: %+v", tt.key, tt.value, b)
		}
	}
}

func TestSetErrors(t *testing.T) {
	tests := []struct{ key, value, want string }{
		{"brokerId", "abc", "not a decimal integer"},
		{"brokerId", "1.5", "not a decimal integer"},
		{"brokerId", "99999999999999999999", "too large"},
		{"listenPort", "4294967296", "too large"},
		{"autoCreateTopicEnable", "yes", `not "true" or "false"`},
		{"fileReservedTime", "-1", "must not be negative"},
		{"fileReservedTime", "9223372036854775807", "too large"},
		{"flushDiskType", "sync_flush", "must be one of SYNC_FLUSH, ASYNC_FLUSH"},
		{"brokerRole", "MASTER", "must be one of ASYNC_MASTER"},
		{"mapedFileSizeConsumeQueue", "-20", "must not be negative"},
	}
	for _, tt := range tests {
		err := Default().Set(tt.key, tt.value)
		var ve *ValueError
		if !errors.As(err, &ve) || ve.Key != tt.key || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Set(%s, %q) = %v, want ValueError containing %q", tt.key, tt.value, err, tt.want)
		}
	}
	if err := Default().Set("noSuchKey", "1"); !errors.Is(err, ErrUnknownKey) {
		t.Errorf("Set(noSuchKey) = %v, want ErrUnknownKey", err)
	}
}

func TestParseErrorsNameKeyLineValue(t *testing.T) {
	tests := []struct{ in, want string }{
		{"brokerName=a\nbrokerId = x1\n", `config: test.conf: brokerId="x1" (test.conf:2): not a decimal integer`},
		{"\n\nflushDiskType=SYNC\n", `flushDiskType="SYNC" (test.conf:3): must be one of`},
		{"brokerId=0\nbrokerName=a\nbrokerId=0\n", "test.conf:3: brokerId is already set on line 1"},
		{"mapedFileSizeCommitLog=1\nmappedFileSizeCommitLog=2\n", "test.conf:2: mappedFileSizeCommitLog is already set on line 1"},
		{"enableDLegerCommitLog = TRUE\n", "DLedger replication is not implemented"},
		{"a=\\u00\n", "test.conf: config: properties syntax error: line 1"},
	}
	for _, tt := range tests {
		_, _, err := Parse([]byte(tt.in), "test.conf")
		if err == nil || !strings.Contains(err.Error(), strings.TrimPrefix(tt.want, "config: test.conf: ")) {
			t.Errorf("Parse(%q) = %v, want error containing %q", tt.in, err, tt.want)
		}
	}
}

func TestUnknownKeys(t *testing.T) {
	_, unknown, err := Parse([]byte("brokername=x\nbrokerIP2=10.0.0.1\nfooBar=1\n"), "t.conf")
	if err != nil {
		t.Fatal(err)
	}
	want := []Unknown{
		{Key: "brokername", Value: "x", Line: 1, Hint: `did you mean "brokerName"?`},
		{Key: "brokerIP2", Value: "10.0.0.1", Line: 2, Hint: "the replication address is the listen host; set --ha-listen or haListenPort"},
		{Key: "fooBar", Value: "1", Line: 3},
	}
	if !reflect.DeepEqual(unknown, want) {
		t.Fatalf("unknown = %+v\nwant %+v", unknown, want)
	}
	if s := unknown[0].String(); s != `line 1: unknown key "brokername": did you mean "brokerName"?` {
		t.Errorf("String() = %s", s)
	}
}

// TestUnknownKeyTypos: a misspelt key gets the supported key it is nearest
// to (edit distance, ignoring case); a key near none gets no hint.
func TestUnknownKeyTypos(t *testing.T) {
	tests := []struct{ key, want string }{
		{"flushDiskTyp", "flushDiskType"},
		{"flushdisktyp", "flushDiskType"},
		{"brokerClustrName", "brokerClusterName"},
		{"autoCreateTopicEnabel", "autoCreateTopicEnable"},
		{"mapedFileSizeComitLog", "mapedFileSizeCommitLog"},
		{"listenPrt", "listenPort"},
		{"fooBar", ""},
		{"x", ""},
	}
	for _, tt := range tests {
		_, unknown, err := Parse([]byte(tt.key+"=1\n"), "t.conf")
		if err != nil {
			t.Fatal(err)
		}
		want := ""
		if tt.want != "" {
			want = fmt.Sprintf("did you mean %q?", tt.want)
		}
		if len(unknown) != 1 || unknown[0].Hint != want {
			t.Errorf("%s: unknown = %+v, want hint %q", tt.key, unknown, want)
		}
	}
}

// TestRocketMQStorePathKeys: the path keys of a RocketMQ broker.conf are
// accepted when they name where Keel keeps that part anyway.
func TestRocketMQStorePathKeys(t *testing.T) {
	conf := "storePathRootDir=/data/store\nstorePathCommitLog=/data/store/commitlog\n" +
		"storePathConsumeQueue=/data/store/consumequeue\nstorePathIndex=/data/store/index\n" +
		"storeCheckpoint=/data/store/checkpoint\nabortFile=/data/store/abort\n"
	b, unknown, err := Parse([]byte(conf), "t.conf")
	if err != nil || len(unknown) != 0 {
		t.Fatalf("Parse: %v, unknown %+v", err, unknown)
	}
	if err := b.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
}

// TestGetSetRoundTrip checks that every key prints its value in the file's
// units: Set(key, get(Default())) leaves Default unchanged.
func TestGetSetRoundTrip(t *testing.T) {
	for _, f := range fields {
		b := Default()
		v := f.get(b)
		if err := b.Set(f.key, v); err != nil {
			t.Errorf("Set(%s, %q): %v", f.key, v, err)
			continue
		}
		b.origin = nil
		if !reflect.DeepEqual(b, Default()) {
			t.Errorf("Set(%s, %q) changed the default", f.key, v)
		}
	}
}
