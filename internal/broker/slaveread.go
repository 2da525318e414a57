package broker

// Reads from slaves (docs/replication.md, "Reads from slaves").
//
// Every broker of a group serves pulls from what it has made visible: a
// slave's dispatcher never passes what it holds durably (per its flush
// mode), so what a consumer reads there is what the master confirmed.
// Which member a consumer should pull from next is the response's
// suggestWhichBrokerId, decided as RocketMQ does: with slaveReadEnable, a
// consumer reading further behind the log end than SlaveReadBehindBytes
// (cold data, RocketMQ's accessMessageInMemoryMaxRatio of the machine's
// memory) is sent to the group's whichBrokerWhenConsumeSlowly, any other
// to the group's brokerId; without it, always to the master (0). The
// official clients fall back to another member of the group when the one
// suggested is not in the route (the master down), so consumers go on
// from a slave while the master is away and return to it when it is back.

import (
	"os"
	"strconv"
	"strings"

	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/store"
)

// suggestBroker is the pull response's suggestWhichBrokerId.
func (b *Broker) suggestBroker(group string, res *store.GetResult) int64 {
	if !b.cfg.SlaveReadEnable {
		return 0
	}
	g, ok := b.core.Group(group)
	if !ok {
		return 0
	}
	if n := len(res.Records); n > 0 {
		last := message.View(res.Records[n-1]).PhysOffset()
		if b.core.VisibleOffset()-last > b.cfg.SlaveReadBehindBytes {
			return g.WhichBrokerWhenConsumeSlowly
		}
	}
	return g.BrokerID
}

// defaultSlaveReadBehind is 40 % of the machine's memory (RocketMQ's
// accessMessageInMemoryMaxRatio default), or 4 GiB when it cannot be read.
func defaultSlaveReadBehind() int64 {
	if total := memTotalBytes(); total > 0 {
		return total / 100 * 40
	}
	return 4 << 30
}

// memTotalBytes reads MemTotal from /proc/meminfo (0 if unavailable).
func memTotalBytes() int64 {
	data, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			f := strings.Fields(rest)
			if len(f) == 2 && f[1] == "kB" {
				if kb, err := strconv.ParseInt(f[0], 10, 64); err == nil {
					return kb << 10
				}
			}
		}
	}
	return 0
}
