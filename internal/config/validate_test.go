package config

import (
	"errors"
	"strings"
	"testing"
)

func TestValidate(t *testing.T) {
	tests := []struct {
		name string
		conf string // applied over Default with Parse
		want []string
	}{
		{"slave id", "brokerRole=SLAVE", []string{`brokerId="0": must be above 0 for a slave`}},
		{"sync master id", "brokerRole=SYNC_MASTER\nbrokerId=1", []string{"must be 0 for a master (brokerRole=SYNC_MASTER)"}},
		{"ha port", "haListenPort=70000", []string{"haListenPort"}},
		{"ha master address", "haMasterAddress=nohost", []string{`haMasterAddress="nohost" (c:1): not host:port`}},
		{"ha advertised address", "haAdvertisedAddress=nohost", []string{`haAdvertisedAddress="nohost" (c:1): not host:port`}},
		{"ha advertised port 0", "haAdvertisedAddress=127.0.0.1:0", []string{"haAdvertisedAddress"}},
		{"min in-sync", "minInSyncReplicas=0", []string{"minInSyncReplicas"}},
		{"replica ack timeout", "replicaAckTimeoutMillis=0", []string{"replicaAckTimeoutMillis"}},
		// The secret is never printed back, also when it is refused.
		{"ha secret short", "haAuthSecret=tooshort", []string{`haAuthSecret="(hidden)" (c:1): shorter than 16 bytes`}},
		{"ha secret twice", "haAuthSecret=0123456789abcdef0123\nhaAuthSecretFile=/etc/keel/ha.secret", []string{"haAuthSecretFile", "keep one"}},
		{"ha trust without tls", "haTLSTrustCertPath=/etc/keel/group-ca.pem", []string{"haTLSTrustCertPath", "needs tlsMode"}},
		{"master id", "brokerId=2", []string{`brokerId="2" (c:1): must be 0 for a master`}},
		{"empty name", "brokerName=", []string{"brokerName=\"\" (c:1): must not be empty"}},
		{"name with space", "brokerClusterName=a\\ b", []string{"must not contain spaces"}},
		{"permission", "brokerPermission=8", []string{"brokerPermission"}},
		{"port", "listenPort=70000", []string{"listenPort"}},
		{"namesrv", "namesrvAddr=a:1;nohost", []string{`namesrvAddr="a:1;nohost" (c:1): "nohost" is not host:port`}},
		{"brokerIP1", "brokerIP1=10.0.0.1/8", []string{"brokerIP1"}},
		{"brokerIP1 host name", "brokerIP1=broker.local", []string{"not an IP address"}},
		{"frame", "maxFrameBytes=1024", []string{"maxFrameBytes"}},
		{"request budget below a frame", "maxInFlightRequestBytes=1048576", []string{"maxInFlightRequestBytes", "at least maxFrameBytes"}},
		{"no connections", "maxConnections=0", []string{"maxConnections"}},
		{"per address above total", "maxConnections=10\nmaxConnectionsPerAddress=11", []string{"maxConnectionsPerAddress"}},
		{"amqp listen", "amqpListen=5672", []string{`amqpListen="5672" (c:1): not host:port`}},
		{"message vs frame", "maxMessageSize=16777216", []string{"maxMessageSize"}},
		{"segment vs message", "mapedFileSizeCommitLog=1048576\nmaxMessageSize=1048576", []string{"mapedFileSizeCommitLog"}},
		{"page cache window", "commitLogPageCacheBytes=1048576", []string{"commitLogPageCacheBytes"}},
		{"page cache window sign", "commitLogPageCacheBytes=-1", []string{"commitLogPageCacheBytes"}},
		{"scrub rate sign", "scrubBytesPerSecond=-1", []string{"scrubBytesPerSecond"}},
		{"commit delay too long", "commitDelayMicros=100001", []string{"commitDelayMicros"}},
		{"commit delay past the flush timeout", "commitDelayMicros=20000\nsyncFlushTimeout=20", []string{"commitDelayMicros"}},
		{"commit siblings", "commitSiblings=0", []string{"commitSiblings"}},
		{"commit siblings too many", "commitSiblings=1001", []string{"commitSiblings"}},
		{"read window sign", "commitLogReadWindowBytes=-1", []string{"commitLogReadWindowBytes"}},
		{"read window size", "commitLogReadWindowBytes=1073741825", []string{"commitLogReadWindowBytes"}},
		{"cq size", "mapedFileSizeConsumeQueue=0", []string{"mapedFileSizeConsumeQueue"}},
		{"commitlog path", "storePathRootDir=/d\nstorePathCommitLog=/elsewhere/commitlog", []string{"Keel keeps the CommitLog at /d/commitlog"}},
		{"consumequeue path", "storePathRootDir=/d\nstorePathConsumeQueue=/elsewhere/cq", []string{"storePathConsumeQueue", "Keel keeps the ConsumeQueues at /d/consumequeue"}},
		{"index path", "storePathRootDir=/d\nstorePathIndex=/elsewhere/index", []string{"Keel keeps the IndexFiles at /d/index"}},
		{"checkpoint path", "storePathRootDir=/d\nstoreCheckpoint=/elsewhere/checkpoint", []string{"Keel keeps the checkpoint at /d/checkpoint"}},
		{"abort path", "storePathRootDir=/d\nabortFile=/elsewhere/abort", []string{"Keel keeps the abort marker at /d/abort"}},
		{"reserved", "fileReservedTime=0", []string{"fileReservedTime"}},
		{"deleteWhen", "deleteWhen=04;25", []string{`deleteWhen="04;25" (c:1): "25" is not an hour`}},
		{"deleteWhen sign", "deleteWhen=+4", []string{"deleteWhen"}},
		{"ratios", "diskMaxUsedSpaceRatio=95", []string{"diskSpaceWarningLevelRatio"}},
		{"ratio low", "diskMaxUsedSpaceRatio=5", []string{"diskMaxUsedSpaceRatio"}},
		{"queues", "defaultTopicQueueNums=0", []string{"defaultTopicQueueNums"}},
		{"delay", "messageDelayLevel=1s 5x", []string{`messageDelayLevel="1s 5x" (c:1): level 2 "5x": must end in a unit`}},
		{"flush interval", "flushIntervalCommitLog=0", []string{"flushIntervalCommitLog"}},
		{"several at once", "listenPort=-1\ntransactionCheckMax=0\nsyncFlushTimeout=0",
			[]string{"listenPort", "transactionCheckMax", "syncFlushTimeout"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, _, err := Parse([]byte(tt.conf), "c")
			if err != nil {
				t.Fatal(err)
			}
			err = b.Validate()
			if err == nil {
				t.Fatalf("Validate succeeded, want errors %q", tt.want)
			}
			var ve *ValueError
			if !errors.As(err, &ve) {
				t.Errorf("error %v is not a *ValueError", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Validate error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestValidateSetFromNamesOrigin(t *testing.T) {
	b := Default()
	if err := b.SetFrom("storePathRootDir", "", "--data-dir"); err != nil {
		t.Fatal(err)
	}
	err := b.Validate()
	if err == nil || !strings.Contains(err.Error(), `storePathRootDir="" (--data-dir): must not be empty`) {
		t.Fatalf("Validate = %v", err)
	}
}

func TestValidateAcceptsRelativeEqualCommitLogPath(t *testing.T) {
	b := Default()
	b.StorePathRootDir = "data"
	b.StorePathCommitLog = "./data/commitlog/"
	if err := b.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestDeleteHours(t *testing.T) {
	b := Default()
	b.DeleteWhen = "04; 16;0"
	h, err := b.DeleteHours()
	if err != nil || len(h) != 3 || h[0] != 4 || h[1] != 16 || h[2] != 0 {
		t.Fatalf("DeleteHours = %v, %v", h, err)
	}
}
