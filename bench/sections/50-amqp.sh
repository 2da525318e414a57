#!/usr/bin/env bash
# bench/sections/50-amqp.sh prints a markdown section of docs/benchmarks.md:
# amqp091-go publishing 1 KiB persistent messages to a durable quorum queue
# with publisher confirms while consuming them with manual acks, against
# Keel (`keel serve`, SYNC_FLUSH) and against RabbitMQ (Debian's
# rabbitmq-server, installed with apt-get when missing) on the same machine
# in the same run. Both listen on loopback ports chosen at run time; both
# are stopped at the end. The driver is bench/amqp (a test: only tests may
# import the client).
#
#   bench/sections/50-amqp.sh                 # 20 s per broker
#   AMQP_BENCH_DURATION=3s bench/sections/50-amqp.sh   # a quick check
#   KEEL_AMQP_BEFORE=2b725ff bench/sections/50-amqp.sh # also Keel at that revision
#
# Environment: AMQP_BENCH_DURATION (20s), AMQP_BENCH_INFLIGHT (256
# confirms in flight), AMQP_BENCH_PREFETCH (256), KEEL_BENCH_DIR (scratch
# data, default a temporary directory under /var/tmp), KEEL_AMQP_BEFORE (a
# revision: its keel, built from `git archive` of it, runs the same
# workload first, in the same sitting, as the table's "before" row).
set -euo pipefail
cd "$(dirname "$0")/../.."

duration=${AMQP_BENCH_DURATION:-20s}
inflight=${AMQP_BENCH_INFLIGHT:-256}
prefetch=${AMQP_BENCH_PREFETCH:-256}
mkdir -p "${KEEL_BENCH_DIR:-/var/tmp}"
work=$(mktemp -d "${KEEL_BENCH_DIR:-/var/tmp}/amqp-bench.XXXXXX")
keel_pid=
rabbit_pid=
cleanup() {
	if [ -n "$keel_pid" ]; then kill "$keel_pid" 2>/dev/null || true; wait "$keel_pid" 2>/dev/null || true; fi
	if [ -n "$rabbit_pid" ]; then
		# rabbitmq-server runs in its own process group (setsid): stop it all.
		kill -TERM -- "-$rabbit_pid" 2>/dev/null || true
		for _ in $(seq 100); do kill -0 "$rabbit_pid" 2>/dev/null || break; sleep 0.1; done
		kill -KILL -- "-$rabbit_pid" 2>/dev/null || true
		# The Erlang port mapper daemonizes out of that group: stop the one
		# this run started (on its own port).
		epmd -port "$ERL_EPMD_PORT" -kill >/dev/null 2>&1 || true
	fi
	rm -rf "$work"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
log() { echo "50-amqp: $*" >&2; }

go build -o "$work/keel" ./cmd/keel
go test -c -o "$work/amqpbench.test" ./bench/amqp
before=${KEEL_AMQP_BEFORE:-}
if [ -n "$before" ]; then
	before=$(git rev-parse --short "$before")
	mkdir "$work/before-src"
	git archive "$before" | tar -x -C "$work/before-src"
	(cd "$work/before-src" && go build -o "$work/keel-before" ./cmd/keel)
fi

# bench drives one broker: URL, then the JSON result file.
bench() {
	KEEL_AMQP_BENCH_URL="$1" KEEL_AMQP_BENCH_OUT="$2" KEEL_AMQP_BENCH_DURATION="$duration" \
		KEEL_AMQP_BENCH_INFLIGHT="$inflight" KEEL_AMQP_BENCH_PREFETCH="$prefetch" KEEL_AMQP_BENCH_QUEUE_TYPE=quorum \
		"$work/amqpbench.test" -test.run '^TestAMQPBench$' -test.timeout 10m >&2
}

# runkeel BINARY NAME: keel serve from BINARY on a fresh data directory,
# the workload against it into $work/NAME.json.
runkeel() {
	mkdir "$work/$2-data"
	"$1" serve --data-dir "$work/$2-data" --namesrv-listen 127.0.0.1:0 --broker-listen 127.0.0.1:0 \
		--amqp-listen 127.0.0.1:0 --kafka-listen "" --http-listen "" 2>"$work/$2.log" &
	keel_pid=$!
	local addr=
	for _ in $(seq 300); do
		addr=$(sed -n 's/.*msg="amqp listening" addr=\([^ ]*\).*/\1/p' "$work/$2.log" | head -1)
		[ -n "$addr" ] && break
		kill -0 "$keel_pid" 2>/dev/null || { cat "$work/$2.log" >&2; exit 1; }
		sleep 0.1
	done
	[ -n "$addr" ] || { log "keel serve ($2) did not listen"; exit 1; }
	log "Keel ($2) on $addr"
	bench "amqp://guest:guest@$addr/" "$work/$2.json"
	kill "$keel_pid"; wait "$keel_pid" 2>/dev/null || true; keel_pid=
	rm -rf "$work/$2-data"
	bench/fill-page-cache.sh --top-up "${KEEL_BENCH_DIR:-/var/tmp/keel-bench}"
}
[ -z "$before" ] || runkeel "$work/keel-before" keel-before
runkeel "$work/keel" keel

# RabbitMQ.
if ! [ -x /usr/lib/rabbitmq/bin/rabbitmq-server ]; then
	log "installing rabbitmq-server"
	apt-get install -y rabbitmq-server >&2
fi
rport=$(free_port)
mkdir -p "$work/rabbit/mnesia" "$work/rabbit/log" "$work/rabbit/home"
echo "[]." >"$work/rabbit/enabled_plugins"
export RABBITMQ_NODE_IP_ADDRESS=127.0.0.1 RABBITMQ_NODE_PORT=$rport RABBITMQ_DIST_PORT=$(free_port) \
	ERL_EPMD_PORT=$(free_port) RABBITMQ_NODENAME="keelbench$$@localhost" \
	RABBITMQ_MNESIA_BASE="$work/rabbit/mnesia" RABBITMQ_LOG_BASE="$work/rabbit/log" \
	RABBITMQ_ENABLED_PLUGINS_FILE="$work/rabbit/enabled_plugins" RABBITMQ_CONFIG_FILE="$work/rabbit/rabbitmq" \
	HOME="$work/rabbit/home"
# Keel's disk alarm is its own business; give RabbitMQ a free-disk limit
# that a scratch disk meets, so that it does not block publishers.
echo "disk_free_limit.absolute = 50MB" >"$work/rabbit/rabbitmq.conf"
setsid /usr/lib/rabbitmq/bin/rabbitmq-server >"$work/rabbit/server.out" 2>&1 &
rabbit_pid=$!
up=
for _ in $(seq 600); do
	if python3 -c "import socket,sys; s=socket.socket(); s.settimeout(0.2); sys.exit(s.connect_ex(('127.0.0.1', $rport)))" 2>/dev/null; then
		up=1; break
	fi
	kill -0 "$rabbit_pid" 2>/dev/null || break
	sleep 0.1
done
[ -n "$up" ] || { tail -30 "$work/rabbit/server.out" >&2; log "rabbitmq-server did not listen"; exit 1; }
sleep 2 # the listener opens before the boot finishes
rversion=$(dpkg-query -W -f '${Version}' rabbitmq-server 2>/dev/null || echo unknown)
log "RabbitMQ $rversion on 127.0.0.1:$rport"
bench "amqp://guest:guest@127.0.0.1:$rport/" "$work/rabbit.json"

field() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])" "$1" "$2"; }
num() { python3 -c "import sys; v=float(sys.argv[1]); print(f'{v:,.0f}' if v >= 100 else f'{v:.2f}')" "$(field "$1" "$2")"; }
ratio() { python3 -c "import json,sys; a,b=(json.load(open(f))['confirmedPerSec'] for f in sys.argv[1:]); print(f'{a/b:.2f}')" "$1" "$2"; }
rev=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)

cat <<MD
## AMQP 0-9-1: Keel against RabbitMQ

amqp091-go (RabbitMQ's Go client, bench/amqp) publishes 1 KiB persistent
messages (delivery-mode 2) to a durable queue declared \`x-queue-type=quorum\`
with publisher confirms (up to $inflight confirms in flight), while a second
connection consumes them with manual acknowledgements (one \`basic.ack\` per
message, prefetch $prefetch), for $duration per broker; one broker at a time,
same machine, same run. Keel: \`keel serve\` with its defaults
(\`flushDiskType=SYNC_FLUSH\`: a confirm follows the group-commit
fdatasync), revision $rev$([ -z "$before" ] || echo " and, first, revision $before (the row \"before\")"). RabbitMQ: Debian's rabbitmq-server $rversion, a
quorum queue (a confirm follows Ra's WAL fsync), default configuration but
\`disk_free_limit.absolute = 50MB\`. Latencies: publish to confirm, and
publish to delivery (end to end).

    $([ -z "$before" ] || echo "KEEL_AMQP_BEFORE=$before ")$([ "$inflight" = 256 ] || echo "AMQP_BENCH_INFLIGHT=$inflight ")$([ "$prefetch" = 256 ] || echo "AMQP_BENCH_PREFETCH=$prefetch ")bench/sections/50-amqp.sh     # AMQP_BENCH_DURATION=$duration

| broker | confirmed msg/s | consumed msg/s | confirm p50 ms | confirm p99 ms | end-to-end p50 ms | end-to-end p99 ms | nacked | left unconsumed |
|---|---|---|---|---|---|---|---|---|
$([ -z "$before" ] || echo "| Keel before ($before) | $(num "$work/keel-before.json" confirmedPerSec) | $(num "$work/keel-before.json" consumedPerSec) | $(num "$work/keel-before.json" confirmP50Ms) | $(num "$work/keel-before.json" confirmP99Ms) | $(num "$work/keel-before.json" endToEndP50Ms) | $(num "$work/keel-before.json" endToEndP99Ms) | $(field "$work/keel-before.json" nacked) | $(field "$work/keel-before.json" unconsumedAtStop) |")
| Keel ($rev) | $(num "$work/keel.json" confirmedPerSec) | $(num "$work/keel.json" consumedPerSec) | $(num "$work/keel.json" confirmP50Ms) | $(num "$work/keel.json" confirmP99Ms) | $(num "$work/keel.json" endToEndP50Ms) | $(num "$work/keel.json" endToEndP99Ms) | $(field "$work/keel.json" nacked) | $(field "$work/keel.json" unconsumedAtStop) |
| RabbitMQ $rversion | $(num "$work/rabbit.json" confirmedPerSec) | $(num "$work/rabbit.json" consumedPerSec) | $(num "$work/rabbit.json" confirmP50Ms) | $(num "$work/rabbit.json" confirmP99Ms) | $(num "$work/rabbit.json" endToEndP50Ms) | $(num "$work/rabbit.json" endToEndP99Ms) | $(field "$work/rabbit.json" nacked) | $(field "$work/rabbit.json" unconsumedAtStop) |

Keel's confirmed msg/s over RabbitMQ's: $(ratio "$work/keel.json" "$work/rabbit.json")×$([ -z "$before" ] || echo "; before ($before): $(ratio "$work/keel-before.json" "$work/rabbit.json")×").
The target: at least 3× RabbitMQ's confirmed-publish throughput at no worse confirm p99.
MD
