#!/usr/bin/env bash
# bench/sections/20-rocketmq-cpu.sh: the RocketMQ door's broker CPU per
# message through the official Go client, an older revision against this
# one, alternately, in one sitting; prints a markdown section to stdout.
#
#   bench/sections/20-rocketmq-cpu.sh
#   KEEL_RMQ_BEFORE=2b725ff KEEL_RMQ_ROUNDS=2 KEEL_BENCH_SECONDS=20 bench/sections/20-rocketmq-cpu.sh
#
# Each run starts its own `keel serve` (SYNC_FLUSH, loopback ports chosen at
# run time) built from the revision, and drives it with bench/official (one
# test binary built from this revision, so the client is the same for both):
# 4 official producers with 256 async sends in flight each, 4 push consumers
# of one group, 1 KiB messages, one topic of 8 queues, KEEL_BENCH_SECONDS of
# sending after a 2 s warm-up; then the driver waits until the consumers have
# received every message sent. Broker CPU per message is the broker process's
# user+system time (/proc/PID/stat) over the driver's whole run (client
# start, warm-up and drain included) divided by the messages produced, each
# delivered once. msg/s is the producers' rate in the measured window; e2e
# latency is from the send stamp in each body to the push consumer's
# callback, over the same window.
#
# Environment: KEEL_RMQ_BEFORE (the revision to compare, default 2b725ff),
# KEEL_RMQ_ROUNDS (default 2), KEEL_BENCH_SECONDS (default 20),
# KEEL_BENCH_DIR (scratch data; default /var/tmp), KEEL_RMQ_PROFILE (a
# directory: each run also writes the broker's CPU profile there),
# KEEL_RMQ_BROKER_ENV and KEEL_RMQ_DRIVER_ENV (VAR=value words added to the
# environment of the broker, of the client process: GOMAXPROCS=8, say),
# KEEL_RMQ_BROKER_WRAP and KEEL_RMQ_DRIVER_WRAP (a command and its words
# that run the process: 'nice -n 10', 'taskset -c 0'), KEEL_RMQ_AFTER_CONF
# (broker.conf lines, separated by ';', for this revision's broker only:
# with KEEL_RMQ_BEFORE=HEAD, one setting against the defaults).
set -euo pipefail
cd "$(dirname "$0")/../.."

before=${KEEL_RMQ_BEFORE:-2b725ff} rounds=${KEEL_RMQ_ROUNDS:-2} secs=${KEEL_BENCH_SECONDS:-20}
base="${KEEL_BENCH_DIR:-/var/tmp}"
mkdir -p "$base"
tmp=$(mktemp -d "$base/keel-rmq-cpu.XXXXXX")
pid=""
cleanup() {
	if [ -n "$pid" ]; then
		kill "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	fi
	rm -rf "$tmp"
}
trap cleanup EXIT

b=$(git rev-parse --short "$before") a=$(git rev-parse --short HEAD)
dirty=""
[ -n "$(git status --porcelain --untracked-files=no -- . ':!docs/benchmarks.md')" ] && dirty=" (with uncommitted changes)"
mkdir -p "$tmp/src-before"
git archive "$b" | tar -x -C "$tmp/src-before"
(cd "$tmp/src-before" && go build -o "$tmp/keel-before" ./cmd/keel)
go build -o "$tmp/keel-after" ./cmd/keel
go test -c -o "$tmp/official.test" ./bench/official

cat >"$tmp/w.yaml" <<EOF
name: rocketmq-cpu
description: 1 KiB, 4 producers x 256 in flight, 4 push consumers, 1 topic x 8 queues
flushDiskType: SYNC_FLUSH
mode: produce-consume
topics: 1
queuesPerTopic: 8
messageSize: 1KiB
producers: 4
inflightPerProducer: 256
consumers: 4
batchSize: 1
producerRate: max
warmup: 2s
duration: ${secs}s
EOF
printf 'flushDiskType=SYNC_FLUSH\ndiskMaxUsedSpaceRatio=90\ndiskSpaceWarningLevelRatio=95\n' >"$tmp/broker-before.conf"
cp "$tmp/broker-before.conf" "$tmp/broker-after.conf"
if [ -n "${KEEL_RMQ_AFTER_CONF:-}" ]; then
	tr ';' '\n' <<<"$KEEL_RMQ_AFTER_CONF" >>"$tmp/broker-after.conf"
fi

cpu() { awk '{ sub(/^.*\) /, ""); print ($12 + $13) / 100 }' "/proc/$pid/stat"; }

# run SIDE ROUND: one broker (before or after), one driver run; appends a
# line to results.
run() {
	local rev=$1 round=$2 ns="" log="$tmp/serve-$rev-$round.log" c0 c1
	rm -rf "$tmp/data"
	bench/fill-page-cache.sh --top-up "${KEEL_BENCH_DIR:-/var/tmp/keel-bench}"
	if [ -n "${KEEL_RMQ_PROFILE:-}" ]; then
		mkdir -p "$KEEL_RMQ_PROFILE"
		export KEEL_CPUPROFILE="$KEEL_RMQ_PROFILE/cpu-$rev-$round.prof"
	fi
	# shellcheck disable=SC2086 # VAR=value words
	${KEEL_RMQ_BROKER_WRAP:-} env ${KEEL_RMQ_BROKER_ENV:-} "$tmp/keel-$rev" serve -c "$tmp/broker-$rev.conf" --data-dir "$tmp/data" --namesrv-listen 127.0.0.1:0 --broker-listen 127.0.0.1:0 \
		--http-listen "" --amqp-listen "" --kafka-listen "" >"$tmp/serve.out" 2>"$log" &
	pid=$!
	unset KEEL_CPUPROFILE
	for _ in $(seq 1 300); do
		ns=$(sed -n 's/.*msg="NameServer listening" addr=\([^ ]*\).*/\1/p' "$log" | head -n1)
		[ -n "$ns" ] && grep -q 'msg="broker listening"' "$log" && break
		kill -0 "$pid" 2>/dev/null || { cat "$log" >&2; exit 1; }
		sleep 0.1
	done
	[ -n "$ns" ] || { echo "20-rocketmq-cpu: keel serve did not report its listeners" >&2; exit 1; }
	sleep 3 # let the broker register with its NameServer
	c0=$(cpu)
	(cd bench/official && KEEL_BENCH_WORKLOAD="$tmp/w.yaml" KEEL_BENCH_NAMESRV="$ns" KEEL_BENCH_BROKER_FLUSH=SYNC_FLUSH \
		KEEL_BENCH_OUT="$tmp/$rev-$round.json" ${KEEL_RMQ_DRIVER_WRAP:-} env ${KEEL_RMQ_DRIVER_ENV:-} "$tmp/official.test" -test.run '^TestOfficialClient$' -test.timeout 30m \
		>"$tmp/driver-$rev-$round.out" 2>&1) || { cat "$tmp/driver-$rev-$round.out" >&2; exit 1; }
	c1=$(cpu)
	kill "$pid"
	wait "$pid" || true
	pid=""
	echo "$rev $round $c0 $c1" >>"$tmp/results"
}

for round in $(seq "$rounds"); do
	for rev in before after; do
		echo "round $round: $rev" >&2
		run "$rev" "$round"
	done
done

envs=""
[ -n "${KEEL_RMQ_BROKER_ENV:-}" ] && envs+="KEEL_RMQ_BROKER_ENV='$KEEL_RMQ_BROKER_ENV' "
[ -n "${KEEL_RMQ_DRIVER_ENV:-}" ] && envs+="KEEL_RMQ_DRIVER_ENV='$KEEL_RMQ_DRIVER_ENV' "
[ -n "${KEEL_RMQ_BROKER_WRAP:-}" ] && envs+="KEEL_RMQ_BROKER_WRAP='$KEEL_RMQ_BROKER_WRAP' "
[ -n "${KEEL_RMQ_DRIVER_WRAP:-}" ] && envs+="KEEL_RMQ_DRIVER_WRAP='$KEEL_RMQ_DRIVER_WRAP' "
[ -n "${KEEL_RMQ_AFTER_CONF:-}" ] && envs+="KEEL_RMQ_AFTER_CONF='$KEEL_RMQ_AFTER_CONF' " && a+=" ($KEEL_RMQ_AFTER_CONF)"
python3 - "$tmp" "$b" "$a$dirty" "$secs" "$before" "$envs" <<'EOF'
import json, sys
tmp, b, a, secs, before, envs = sys.argv[1:7]
print("## RocketMQ door: broker CPU per message, official Go client\n")
print("```sh\n%sKEEL_RMQ_BEFORE=%s KEEL_BENCH_SECONDS=%s bench/sections/20-rocketmq-cpu.sh\n```\n" % (envs, before, secs))
print("A fresh `keel serve` (SYNC_FLUSH: every acknowledged send was fdatasync'd) per run, %s then %s, alternately. "
      "The official Go client: 4 producers with 256 async sends in flight each and 4 push consumers of one group; "
      "1 KiB messages, one topic of 8 queues, %s s of sending after a 2 s warm-up, then every message sent is "
      "waited for at the consumers. Broker CPU per message: the broker process's user+system time over the whole "
      "driver run divided by the messages produced (each delivered once). msg/s and the end-to-end latency "
      "(send stamp to the consumer's callback) cover the measured window.\n" % (b, a.split()[0], secs))
print("| revision | round | messages produced | publish msg/s | e2e p50 | e2e p99 | broker CPU µs/msg |")
print("|---|---:|---:|---:|---:|---:|---:|")
for line in open(tmp + "/results"):
    rev, rnd, c0, c1 = line.split()
    r = json.load(open("%s/%s-%s.json" % (tmp, rev, rnd)))
    s, rc = r["send"], r["receive"]
    n = r["total_sent"]
    name = b if rev == "before" else a
    print("| %s | %s | %d | %.0f | %.1f ms | %.1f ms | %.1f |" % (name, rnd, n, s["msgs_per_sec"],
          rc["latency"]["p50_ns"] / 1e6, rc["latency"]["p99_ns"] / 1e6, (float(c1) - float(c0)) * 1e6 / n))
EOF
