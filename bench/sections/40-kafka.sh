#!/usr/bin/env bash
# bench/sections/40-kafka.sh: the Kafka door against the RocketMQ door, same
# broker, same store, same run; prints a markdown section to stdout.
#
#   bench/sections/40-kafka.sh                 10 s per phase
#   KEEL_BENCH_SECONDS=30 bench/sections/40-kafka.sh
#
# One `keel serve` (SYNC_FLUSH, loopback ports chosen at run time) serves
# both doors. Kafka: franz-go producers send 1 KiB records with acks=all
# (idempotent, batches as the client makes them) for the phase's time, then
# one consumer reads them all back (bench/kafkaclient). RocketMQ: keel bench
# sends 1 KiB messages (async, 256 in flight per producer, unbatched) for
# the same time, then consumes from each queue's start. Both use 4 producers
# and a topic of 8 partitions/queues; the payload is random (incompressible)
# and the Kafka producers do not compress, as the RocketMQ side does not. CPU per message is the broker
# process's user+system time over the phase (/proc/PID/stat) divided by the
# messages acknowledged or consumed in it (keel bench: over its whole run,
# warm-up included, divided by all it sent or received).
#
# Environment: KEEL_BENCH_DIR (scratch data; default a temporary directory
# under /var/tmp), KEEL_BENCH_SECONDS (per phase, default 10).
set -euo pipefail
cd "$(dirname "$0")/../.."

secs="${KEEL_BENCH_SECONDS:-10}"
base="${KEEL_BENCH_DIR:-/var/tmp}"
mkdir -p "$base"
tmp=$(mktemp -d "$base/keel-kafka-bench.XXXXXX")
pid=""
cleanup() {
	if [ -n "$pid" ]; then
		kill "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	fi
	rm -rf "$tmp"
}
trap cleanup EXIT

go build -o "$tmp/keel" ./cmd/keel
printf 'flushDiskType=SYNC_FLUSH\ndiskMaxUsedSpaceRatio=90\ndiskSpaceWarningLevelRatio=95\n' >"$tmp/broker.conf"
"$tmp/keel" serve -c "$tmp/broker.conf" --data-dir "$tmp/data" --namesrv-listen 127.0.0.1:0 --broker-listen 127.0.0.1:0 \
	--http-listen "" --amqp-listen "" --kafka-listen 127.0.0.1:0 >"$tmp/serve.out" 2>"$tmp/serve.log" &
pid=$!
kafka="" ns=""
for _ in $(seq 1 300); do
	kafka=$(sed -n 's/.*msg="Kafka listening" .*addr=\([^ ]*\).*/\1/p' "$tmp/serve.log" | head -n1)
	ns=$(sed -n 's/.*msg="NameServer listening" addr=\([^ ]*\).*/\1/p' "$tmp/serve.log" | head -n1)
	[ -n "$kafka" ] && [ -n "$ns" ] && grep -q 'msg="broker listening"' "$tmp/serve.log" && break
	kill -0 "$pid" 2>/dev/null || { cat "$tmp/serve.log" >&2; exit 1; }
	sleep 0.1
done
[ -n "$kafka" ] && [ -n "$ns" ] || { echo "40-kafka: keel serve did not report its listeners" >&2; exit 1; }
sleep 3 # let the broker register with its NameServer

cpu() { awk '{ sub(/^.*\) /, ""); print ($12 + $13) / 100 }' "/proc/$pid/stat"; }

# Kafka door.
KEEL_BENCH_KAFKA="$kafka" KEEL_BENCH_PID="$pid" KEEL_BENCH_SECONDS="$secs" KEEL_BENCH_OUT="$tmp/kafka.json" \
	go test -count=1 -timeout 30m -run '^TestKafkaClient$' ./bench/kafkaclient >"$tmp/kafka.out" 2>&1 ||
	{ cat "$tmp/kafka.out" >&2; exit 1; }

# RocketMQ door, the same broker.
cat >"$tmp/rmq-produce.yaml" <<EOF
name: kafka-compare
description: 1 KiB, 4 producers, async with 256 in flight each, unbatched, 1 topic x 8 queues
flushDiskType: SYNC_FLUSH
mode: produce
topics: 1
queuesPerTopic: 8
messageSize: 1KiB
producers: 4
inflightPerProducer: 256
batchSize: 1
producerRate: max
warmup: 2s
duration: ${secs}s
EOF
sed -e 's/^mode: produce/mode: consume/' -e 's/^description: .*/description: consume from each queue'"'"'s start, 4 consumers, 32 per pull/' \
	-e 's/^producers: 4/consumers: 4/' -e 's/^warmup: .*/warmup: 0s/' "$tmp/rmq-produce.yaml" >"$tmp/rmq-consume.yaml"
c0=$(cpu)
"$tmp/keel" bench -w "$tmp/rmq-produce.yaml" --namesrv "$ns" --broker-flush SYNC_FLUSH -o json >"$tmp/rmq-produce.json" 2>"$tmp/rmq-produce.log" ||
	{ cat "$tmp/rmq-produce.log" >&2; exit 1; }
c1=$(cpu)
"$tmp/keel" bench -w "$tmp/rmq-consume.yaml" --namesrv "$ns" --broker-flush SYNC_FLUSH -o json >"$tmp/rmq-consume.json" 2>"$tmp/rmq-consume.log" ||
	{ cat "$tmp/rmq-consume.log" >&2; exit 1; }
c2=$(cpu)

python3 - "$tmp" "$c0" "$c1" "$c2" "$secs" <<'EOF'
import json, sys
tmp, c0, c1, c2, secs = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
k = json.load(open(tmp + "/kafka.json"))
rp = json.load(open(tmp + "/rmq-produce.json"))
rc = json.load(open(tmp + "/rmq-consume.json"))
def us(cpu, n):
    return "%.1f" % (cpu * 1e6 / n) if n else "n/a"
print("## Kafka door and RocketMQ door, same broker\n")
print("```sh\nbench/sections/40-kafka.sh   # KEEL_BENCH_SECONDS=%s\n```\n" % secs)
print("One `keel serve` (SYNC_FLUSH) serves both doors. 1 KiB records, 4 producers, a topic of 8 partitions/queues. "
      "Kafka: franz-go, acks=all, idempotent, batches as the client makes them, uncompressed (random payload); one consumer reads everything back. "
      "RocketMQ: `keel bench`, async sends with 256 in flight per producer, unbatched; 4 consumers read from each queue's start. "
      "Broker CPU per message is the broker process's user+system time divided by the messages of the phase.\n")
print("| door | phase | messages | msg/s | MB/s | broker CPU µs/msg | errors |")
print("|---|---|---:|---:|---:|---:|---:|")
for name, ph in (("produce (acks=all)", k["produce"]), ("consume", k["consume"])):
    print("| Kafka (franz-go) | %s | %d | %.0f | %.1f | %.1f | %d |" % (name, ph["messages"], ph["msgs_per_sec"], ph["mb_per_sec"], ph["broker_cpu_us_per_msg"], ph["errors"]))
s, r = rp.get("send") or {}, rc.get("receive") or {}
print("| RocketMQ (keel bench) | produce (SYNC_FLUSH) | %d | %.0f | %.1f | %s | %d |" % (s.get("messages", 0), s.get("msgs_per_sec", 0), s.get("mb_per_sec", 0), us(c1 - c0, rp.get("total_sent", 0)), rp.get("total_send_errors", 0)))
print("| RocketMQ (keel bench) | consume | %d | %.0f | %.1f | %s | %d |" % (r.get("messages", 0), r.get("msgs_per_sec", 0), r.get("mb_per_sec", 0), us(c2 - c1, rc.get("total_received", 0)), rc.get("total_receive_errors", 0)))
EOF
