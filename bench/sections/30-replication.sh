#!/usr/bin/env bash
# bench/sections/30-replication.sh: the cost of a replicated acknowledgement.
# A SYNC_MASTER + SYNC_FLUSH broker group (NameServer, master, slave: three
# `keel` processes on loopback, minInSyncReplicas=2, so every SEND_OK waits for
# the master's fdatasync and the slave's) against a single SYNC_FLUSH broker
# (`keel serve`), on this machine, in this run, data on the same disk. Each
# workload runs on the single broker, then on the group, then on the single
# broker again (the spread of the two single runs says how steady the machine
# was). Prints a markdown section (heading, commands, table) to stdout; progress
# goes to stderr.
#
#   bench/sections/30-replication.sh           30 s per run (5 s warm-up); a quiet machine
#   bench/sections/30-replication.sh --quick   3 s per run: checks the machinery, not a measurement
#
# Environment: KEEL_BENCH_DIR (scratch data, default /var/tmp/keel-bench; on the
# disk you want to measure), KEEL_BENCH_KEEP=1 (keep the scratch directory: logs, JSON),
# KEEL_BENCH_BASE=REV (also a group built from revision REV, run after the single
# broker's first run: the same comparison before a change, in the same sitting).
set -euo pipefail
cd "$(dirname "$0")/../.."

duration=30s warmup=5s quick=""
case "${1:-}" in
--quick) duration=3s warmup=1s quick=1 ;;
"") ;;
*) echo "usage: $0 [--quick]" >&2; exit 2 ;;
esac
workloads="${KEEL_BENCH_WORKLOADS:-sync-one-sender sync-64-senders}"

base="${KEEL_BENCH_DIR:-/var/tmp/keel-bench}"
mkdir -p "$base"
work=$(mktemp -d "$base/replication.XXXXXX")
keel="$work/keel"
pids=()
base_rev="${KEEL_BENCH_BASE:-}"
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	if [ -n "$base_rev" ]; then git worktree remove --force "$work/base-src" >/dev/null 2>&1 || true; fi
	if [ -n "${KEEL_BENCH_KEEP:-}" ]; then log "kept $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT
log() { echo "30-replication: $*" >&2; }

# start NAME ARGS...: a keel process ($bin, default $keel) logging to $work/NAME.log.
declare -A pid_of
start() {
	local name=$1
	shift
	"${bin:-$keel}" "$@" >"$work/$name.log" 2>&1 &
	pids+=($!)
	pid_of[$name]=$!
}

# ticks PID: the process's user+system CPU time so far, in clock ticks.
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
# busy: the machine's non-idle clock ticks so far (every CPU), then its total.
busy() { awk '/^cpu /{t=0; for (i = 2; i <= NF; i++) t += $i; print t - $5 - $6, t}' /proc/stat; }

# await NAME PATTERN: waits for PATTERN (grep -P, \K before the value) in
# NAME's log and prints the first match.
await() {
	local m
	for _ in $(seq 600); do
		if m=$(grep -oP "$2" "$work/$1.log" 2>/dev/null | head -1) && [ -n "$m" ]; then
			echo "$m"
			return
		fi
		sleep 0.1
	done
	log "timed out waiting for $2 in $1.log:"
	tail -20 "$work/$1.log" >&2
	exit 1
}

log "building keel"
go build -o "$keel" ./cmd/keel
rev=$(git rev-parse --short HEAD)
if [ -n "$base_rev" ]; then
	log "building keel at $base_rev"
	git worktree add -q --detach "$work/base-src" "$base_rev"
	(cd "$work/base-src" && go build -o "$work/keel-base" ./cmd/keel)
	base_rev=$(git rev-parse --short "$base_rev")
fi

noDoors=(--http-listen "" --amqp-listen "" --kafka-listen "")
common='brokerClusterName=bench
brokerName=broker-r
flushDiskType=SYNC_FLUSH
diskMaxUsedSpaceRatio=90
diskSpaceWarningLevelRatio=95
minInSyncReplicas=2'
printf '%s\nbrokerRole=SYNC_MASTER\nbrokerId=0\n' "$common" >"$work/master.conf"
printf 'flushDiskType=SYNC_FLUSH\ndiskMaxUsedSpaceRatio=90\ndiskSpaceWarningLevelRatio=95\n' >"$work/single.conf"

log "starting the single broker"
start single serve -c "$work/single.conf" --data-dir "$work/single" --namesrv-listen 127.0.0.1:0 \
	--broker-listen 127.0.0.1:0 "${noDoors[@]}"
single_ns=$(await single 'msg="NameServer listening" addr=\K\S+')
await single 'msg="broker listening"' >/dev/null

# group PREFIX VAR [SLAVE_FLUSH]: starts a group (NameServer, SYNC_MASTER, SLAVE)
# whose logs and data carry PREFIX, and sets VAR to its NameServer address. The
# slave runs flushDiskType=SLAVE_FLUSH (default SYNC_FLUSH).
group() {
	local p=$1 ns ha slave_common=$common
	if [ -n "${3:-}" ]; then slave_common=${common/flushDiskType=SYNC_FLUSH/flushDiskType=$3}; fi
	start "${p}namesrv" namesrv --namesrv-listen 127.0.0.1:0
	ns=$(await "${p}namesrv" 'msg="NameServer listening" addr=\K\S+')
	start "${p}master" broker -n "$ns" -c "$work/master.conf" --data-dir "$work/${p}master" \
		--broker-listen 127.0.0.1:0 --ha-listen 127.0.0.1:0 "${noDoors[@]}"
	ha=$(await "${p}master" 'msg="replication listening" component=replication addr=\K\S+')
	printf '%s\nbrokerRole=SLAVE\nbrokerId=1\nhaMasterAddress=%s\n' "$slave_common" "$ha" >"$work/${p}slave.conf"
	start "${p}slave" broker -n "$ns" -c "$work/${p}slave.conf" --data-dir "$work/${p}slave" \
		--broker-listen 127.0.0.1:0 "${noDoors[@]}"
	await "${p}master" 'msg="replication: replica in sync"' >/dev/null
	printf -v "$2" '%s' "$ns"
}
log "starting the group: NameServer, SYNC_MASTER, SLAVE"
group "" group_ns
log "starting the group whose slave runs ASYNC_FLUSH"
group async- async_ns ASYNC_FLUSH
if [ -n "$base_rev" ]; then
	log "starting the group at $base_rev"
	bin="$work/keel-base" group base- base_ns
fi

# run WORKLOAD LABEL NAMESRV: one keel bench run, its JSON kept.
# run WORKLOAD LABEL NS BROKER [SLAVE]: the workload against NS; the CPU the
# broker (the master) and the slave used over the whole bench run (warm-up
# included) per message sent, and how busy the machine was, into LABEL's
# .cpu file: "broker-µs slave-µs busy-%".
run() {
	log "$1 on the $2"
	local b0 s0=0 m0 b1 s1=0 m1
	b0=$(ticks "${pid_of[$4]}")
	if [ -n "${5:-}" ]; then s0=$(ticks "${pid_of[$5]}"); fi
	m0=$(busy)
	"$keel" bench -w "bench/workloads/$1.yaml" --namesrv "$3" --broker-flush SYNC_FLUSH \
		--duration "$duration" --warmup "$warmup" -o json >"$work/$1-$2.json" 2>"$work/$1-$2.err"
	b1=$(ticks "${pid_of[$4]}")
	if [ -n "${5:-}" ]; then s1=$(ticks "${pid_of[$5]}"); fi
	m1=$(busy)
	python3 -c '
import json, os, sys
b0, b1, s0, s1 = map(int, sys.argv[2:6])
m0, t0, m1, t1 = map(int, sys.argv[6].split() + sys.argv[7].split())
n = json.load(open(sys.argv[1]))["total_sent"]
us = 1e6 / os.sysconf("SC_CLK_TCK") / max(n, 1)
print(f"{(b1 - b0) * us:.1f} {(s1 - s0) * us:.1f} {100 * (m1 - m0) / max(t1 - t0, 1):.0f}")
' "$work/$1-$2.json" "$b0" "$b1" "$s0" "$s1" "$m0" "$m1" >"$work/$1-$2.cpu"
}
for w in $workloads; do
	run "$w" single-1 "$single_ns" single
	if [ -n "$base_rev" ]; then run "$w" group-base "$base_ns" base-master base-slave; fi
	run "$w" group "$group_ns" master slave
	run "$w" group-async "$async_ns" async-master async-slave
	run "$w" single-2 "$single_ns" single
done

ms() { jq -r "$1 / 1e6 | . * 100 | round / 100" "$2"; }
row() { # workload label file
	local cpu
	read -r -a cpu <"${3%.json}.cpu"
	printf '| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n' "$1" "$2" \
		"$(jq -r '.send.msgs_per_sec | round' "$3")" "$(ms .send.latency.p50_ns "$3")" \
		"$(ms .send.latency.p99_ns "$3")" "$(ms .send.latency.p999_ns "$3")" "$(jq -r '.send.errors' "$3")" \
		"${cpu[0]}" "$([ "${2#single}" = "$2" ] && echo "${cpu[1]}" || echo "-")" "${cpu[2]}"
}

echo "## Replication: SYNC_MASTER + SYNC_FLUSH against a single SYNC_FLUSH broker"
echo
if [ -n "$quick" ]; then
	echo "**Quick run ($duration per run): a check of the machinery, not a measurement.**"
	echo
fi
echo "Revision $rev, $(date -u +%Y-%m-%d), $(nproc) cores. Every process on loopback, data under \`$base\`."
echo "The group is three processes: \`keel namesrv\`, a master and a slave, both"
echo "\`flushDiskType=SYNC_FLUSH\`, the master \`brokerRole=SYNC_MASTER\` with \`minInSyncReplicas=2\`:"
echo "a send is answered SEND_OK after the master's fdatasync and the slave's acknowledgement of its own."
echo "The single broker is \`keel serve\` with \`flushDiskType=SYNC_FLUSH\`. Each workload ran on the"
echo "single broker, on the group, on a second group whose slave runs \`flushDiskType=ASYNC_FLUSH\`"
echo "(it acknowledges a range once written, before its fdatasync: a SEND_OK is then on the master's"
echo "disk and in the slave's memory, which survives the loss of either machine but not a power cut of"
echo "both), then on the single broker again."
if [ -n "$base_rev" ]; then
	echo "A second group, the same three processes built from revision $base_rev (before the change"
	echo "measured), ran each workload after the single broker's first run, in the same sitting."
fi
echo
echo '```'
echo "keel serve -c single.conf --data-dir single --namesrv-listen 127.0.0.1:0 --broker-listen 127.0.0.1:0"
echo "keel namesrv --namesrv-listen 127.0.0.1:0"
echo "keel broker -n NS -c master.conf --data-dir master --broker-listen 127.0.0.1:0 --ha-listen 127.0.0.1:0"
echo "keel broker -n NS -c slave.conf --data-dir slave --broker-listen 127.0.0.1:0"
for w in $workloads; do
	echo "keel bench -w bench/workloads/$w.yaml --namesrv NS --broker-flush SYNC_FLUSH --duration $duration --warmup $warmup -o json"
done
echo '```'
echo
echo "master.conf:"
echo
echo '```'
cat "$work/master.conf"
echo '```'
echo
echo "| workload | broker | msg/s | send p50 ms | send p99 ms | send p99.9 ms | errors | broker (master) CPU µs/msg | slave CPU µs/msg | machine busy % |"
echo "|---|---|---|---|---|---|---|---|---|---|"
for w in $workloads; do
	row "$w" "single (before)" "$work/$w-single-1.json"
	if [ -n "$base_rev" ]; then row "$w" "SYNC_MASTER + slave at $base_rev" "$work/$w-group-base.json"; fi
	row "$w" "SYNC_MASTER + slave" "$work/$w-group.json"
	row "$w" "SYNC_MASTER + slave over ASYNC_FLUSH" "$work/$w-group-async.json"
	row "$w" "single (after)" "$work/$w-single-2.json"
done
echo
echo "\`sync-one-sender\` shows what one replicated acknowledgement adds to a send (the goal: at most"
echo "one network round trip, the two fdatasyncs overlapping); \`sync-64-senders\` what it costs in"
echo "throughput when many sends share each group commit. Master and slave share this machine's one"
echo "disk, which takes one cache flush at a time: the group over SYNC_FLUSH pays two fdatasyncs on it per"
echo "group commit, the group over ASYNC_FLUSH one, as a group on two machines would."
echo "They share its two cores too: the CPU columns are each broker process's user+system time over"
echo "the whole bench run (warm-up included) per message sent, and the machine's share of non-idle"
echo "time over the run (the bench client, the NameServer and the kernel's own work included)."
