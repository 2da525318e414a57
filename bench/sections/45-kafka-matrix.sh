#!/usr/bin/env bash
# bench/sections/45-kafka-matrix.sh: the Kafka door with compression on
# compressible records, with 1, 8 and 64 partitions, and a consumer reading
# a backlog from a cold page cache; prints a markdown section to stdout.
#
#   bench/sections/45-kafka-matrix.sh            3 s warm-up + 10 s per cell, 1 GiB backlog (about 3 min)
#   bench/sections/45-kafka-matrix.sh --quick    1 s + 3 s per cell, 256 MiB backlog
#
# Every cell is a new `keel serve` (SYNC_FLUSH, only the Kafka door, ports
# chosen at run time on 127.0.0.1, its data removed after the cell) driven
# by bench/peers's Kafka driver, the workload of 80-peers: franz-go, acks=all,
# idempotent, 4 producers with at most 256 records buffered each, 4
# consumers reading while they are produced. Payload "json": 1 KiB of
# JSON-like event records (about 3:1 under deflate), "random": incompressible.
# The backlog: the producers fill a topic of 8 partitions with no consumer,
# then the page cache is dropped (echo 3 > /proc/sys/vm/drop_caches: root
# only) and 4 consumers read it all; beside it, the raw figure: the same
# CommitLog files read sequentially with dd after dropping the cache again.
#
# Environment: KEEL_BENCH_DIR (scratch data; default a temporary directory
# under /var/tmp), MATRIX_WARMUP, MATRIX_DURATION, MATRIX_BACKLOG_MIB.
set -euo pipefail
cd "$(dirname "$0")/../.."

warmup=3s duration=10s backlog=1024 mode=""
if [ "${1:-}" = "--quick" ]; then warmup=1s duration=3s backlog=256 mode=" --quick"; fi
warmup=${MATRIX_WARMUP:-$warmup}
duration=${MATRIX_DURATION:-$duration}
backlog=${MATRIX_BACKLOG_MIB:-$backlog}
base="${KEEL_BENCH_DIR:-/var/tmp}"
mkdir -p "$base"
work=$(mktemp -d "$base/kafka-matrix.XXXXXX")
pid=""
stop_pid() {
	if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
	pid=""
}
cleanup() { stop_pid; rm -rf "$work"; }
trap cleanup EXIT
log() { echo "45-kafka-matrix: $*" >&2; }

log "building keel and bench/peers"
go build -o "$work/keel" ./cmd/keel
(cd bench/peers && go test -c -o "$work/peers.test" .)

# serve: a new keel serve with only the Kafka door; sets pid and addr.
serve() {
	rm -rf "$work/data"
	bench/fill-page-cache.sh --top-up "${KEEL_BENCH_DIR:-/var/tmp/keel-bench}"
	printf 'flushDiskType=SYNC_FLUSH\ndiskMaxUsedSpaceRatio=90\ndiskSpaceWarningLevelRatio=95\n' >"$work/broker.conf"
	"$work/keel" serve -c "$work/broker.conf" --data-dir "$work/data" --namesrv-listen 127.0.0.1:0 --broker-listen 127.0.0.1:0 \
		--http-listen "" --amqp-listen "" --kafka-listen 127.0.0.1:0 >"$work/serve.out" 2>"$work/serve.log" &
	pid=$!
	addr=""
	for _ in $(seq 300); do
		addr=$(sed -n 's/.*msg="Kafka listening" .*addr=\([^ ]*\).*/\1/p' "$work/serve.log" | head -n1)
		[ -n "$addr" ] && return 0
		kill -0 "$pid" 2>/dev/null || { cat "$work/serve.log" >&2; exit 1; }
		sleep 0.1
	done
	log "keel serve did not report its Kafka listener"
	exit 1
}

# cell NAME PAYLOAD COMPRESSION PARTITIONS
cells=()
cell() {
	local name=$1
	serve
	log "$name: payload $2, compression $3, $4 partitions, $warmup + $duration"
	KEEL_PEER_DRIVER=kafka KEEL_PEER_ADDR="$addr" KEEL_PEER_PIDS="$pid" KEEL_PEER_OUT="$work/$name.json" \
		KEEL_PEER_WARMUP="$warmup" KEEL_PEER_DURATION="$duration" KEEL_PEER_PAYLOAD="$2" KEEL_PEER_COMPRESSION="$3" \
		KEEL_PEER_PARTITIONS="$4" "$work/peers.test" -test.run '^TestPeer$' -test.timeout 10m >"$work/$name.out" 2>&1 ||
		{ tail -40 "$work/$name.out" >&2; log "$name failed"; exit 1; }
	stop_pid
	cells+=("$name")
}
cell random-none-8 random none 8
cell json-none-8 json none 8
cell json-snappy-8 json snappy 8
cell json-lz4-8 json lz4 8
cell json-zstd-8 json zstd 8
cell json-snappy-1 json snappy 1
cell json-snappy-64 json snappy 64

# The backlog, read cold.
serve
log "backlog: $backlog MiB, random payload, uncompressed, 8 partitions"
KEEL_PEER_ADDR="$addr" KEEL_PEER_PIDS="$pid" KEEL_PEER_OUT="$work/backlog.json" KEEL_PEER_BACKLOG_BYTES=$((backlog << 20)) \
	KEEL_PEER_PARTITIONS=8 "$work/peers.test" -test.run '^TestKafkaBacklog$' -test.timeout 20m >"$work/backlog.out" 2>&1 ||
	{ tail -40 "$work/backlog.out" >&2; log "backlog failed"; exit 1; }
stop_pid
# The raw figure: the CommitLog's files, cold, read in order.
sync
echo 3 >/proc/sys/vm/drop_caches
raw_bytes=$(find "$work/data" -path '*commitlog*' -type f -printf '%s\n' | awk '{ s += $1 } END { print s + 0 }')
t0=$(date +%s.%N)
find "$work/data" -path '*commitlog*' -type f | sort | xargs cat | dd of=/dev/null bs=1M status=none
t1=$(date +%s.%N)
raw_mbps=$(python3 -c "import sys; print('%.0f' % (int(sys.argv[1]) / (float(sys.argv[3]) - float(sys.argv[2])) / 1e6))" "$raw_bytes" "$t0" "$t1")
rm -rf "$work/data"

rev=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
python3 - "$work" "$rev" "$warmup" "$duration" "$mode" "$raw_bytes" "$raw_mbps" "${cells[@]}" <<'EOF'
import json, os, sys
work, rev, warmup, duration, mode, raw_bytes, raw_mbps = sys.argv[1:8]
print("## Kafka door: compression, partitions, a cold backlog\n")
print("```sh\nbench/sections/45-kafka-matrix.sh%s   # %s warm-up + %s measured per cell\n```\n" % (mode, warmup, duration))
print("The workload of the peer table (bench/sections/80-peers.sh) through the Kafka door only: franz-go, acks=all, idempotent, "
      "4 producers with at most 256 records buffered each, 4 consumers reading while they are produced, 1 KiB records; "
      "a new `keel serve` (SYNC_FLUSH) per cell, revision %s. Payload *json*: JSON-like event records (compressible, about 3:1 under deflate); "
      "*random*: incompressible bytes. Compression is the producers' (franz-go's default is snappy); the broker stores the batches as they come. "
      "Broker CPU: user+system time of `keel serve` over the measured window divided by the records acknowledged in it.\n" % rev)
print("| payload | compression | partitions | publish msg/s | delivered msg/s | e2e p50 ms | e2e p99 ms | broker CPU µs/msg | errors |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
notes = []
for name in sys.argv[8:]:
    r = json.load(open(os.path.join(work, name + ".json")))
    if r.get("first_error"):
        notes.append("%s, %s, %d partitions: %d errors, the first `%s`" % (r["payload"], r["compression"], r["partitions"], r["errors"], r["first_error"]))
    print("| %s | %s | %d | %.0f | %.0f | %.2f | %.1f | %.1f | %d |" % (r["payload"], r["compression"], r["partitions"],
          r["publish_msgs_per_sec"], r["deliver_msgs_per_sec"], r["e2e_p50_ms"], r["e2e_p99_ms"], r["broker_cpu_us_per_msg"], r["errors"]))
if notes:
    print("\n" + "\n\n".join(notes))
b = json.load(open(os.path.join(work, "backlog.json")))
print("\nA backlog read from disk: the producers fill a topic of 8 partitions with %d records (%.0f MiB of random payload, uncompressed) "
      "in %.1f s with no consumer; the page cache is dropped (`echo 3 > /proc/sys/vm/drop_caches`%s); then 4 consumers, splitting the "
      "partitions, read everything from the start. Raw: the CommitLog's files (%.0f MiB) read in order with `cat | dd` after dropping the cache again.\n"
      % (b["messages"], b["payload_bytes"] / 2**20, b["produce_seconds"], "" if b["cache_dropped"] else ": NOT done", int(raw_bytes) / 2**20))
print("| read | MB/s | msg/s | seconds | broker CPU µs/msg |")
print("|---|---:|---:|---:|---:|")
print("| Kafka consumers, cold backlog (payload bytes) | %.0f | %.0f | %.1f | %.1f |" % (b["consume_payload_mb_per_sec"], b["consume_msgs_per_sec"], b["consume_seconds"], b["consume_broker_cpu_us_per_msg"]))
print("| raw: the CommitLog files, cold, `cat \\| dd` | %s | | | |" % raw_mbps)
EOF
