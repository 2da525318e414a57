#!/usr/bin/env bash
# bench/idle.sh: the CPU an idle `keel serve` uses, with every door on (NameServer,
# broker, AMQP, HTTP, Kafka, each on a loopback port chosen at run time) and a fresh
# data directory, and no client connected.
#
#   bench/idle.sh                  build ./cmd/keel at the work tree and measure it
#   bench/idle.sh REV ...          build each git revision and measure it, in order
#   KEEL=path bench/idle.sh        (no REV) measure this binary instead of building one
#
# Each run starts keel serve, waits WARMUP seconds (default 10), then reads the
# process's own CPU time (utime+stime in /proc/PID/stat) at the start and the end
# of WINDOW seconds (default 60) and prints it as % of one core. Counting only the
# process's own CPU time keeps other load on the machine out of the figure (it is
# not wall-clock utilisation, and a loaded machine inflates it only a little, by
# cache and scheduling effects). Extra broker.conf lines: CONF="k=v\nk=v".
# GROUP=1: instead of keel serve, a broker group of three processes (keel namesrv, a
# SYNC_MASTER with minInSyncReplicas=2 and its SYNC_FLUSH slave, every door on), measured
# once the slave is in sync: one line for the master, one for the slave.
# Environment: KEEL_BENCH_DIR (scratch; default /var/tmp/keel-bench).
set -euo pipefail
cd "$(dirname "$0")/.."
warmup=${WARMUP:-10} window=${WINDOW:-60}
scratch=${KEEL_BENCH_DIR:-/var/tmp/keel-bench}/idle
mkdir -p "$scratch"
hz=$(getconf CLK_TCK)

cputicks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

measure() { # measure BINARY LABEL
	local bin=$1 label=$2 dir pid t0 t1 w0 w1
	dir=$(mktemp -d "$scratch/run.XXXXXX")
	printf '%b\n' "${CONF:-}" >"$dir/broker.conf"
	"$bin" serve -c "$dir/broker.conf" --data-dir "$dir/data" \
		--namesrv-listen 127.0.0.1:0 --broker-listen 127.0.0.1:0 --http-listen 127.0.0.1:0 \
		--amqp-listen 127.0.0.1:0 --kafka-listen 127.0.0.1:0 >"$dir/log" 2>&1 &
	pid=$!
	for _ in $(seq 100); do
		grep -q 'Kafka listening' "$dir/log" && break
		kill -0 "$pid" 2>/dev/null || { cat "$dir/log" >&2; return 1; }
		sleep 0.1
	done
	sleep "$warmup"
	t0=$(cputicks "$pid") w0=$(date +%s.%N)
	sleep "$window"
	t1=$(cputicks "$pid") w1=$(date +%s.%N)
	kill -TERM "$pid"
	wait "$pid" || true
	awk -v l="$label" -v t="$((t1 - t0))" -v hz="$hz" -v w0="$w0" -v w1="$w1" -v la="$(cut -d' ' -f1-3 /proc/loadavg)" \
		'BEGIN { printf "%-12s %6.3f %% of one core (%d ticks of 1/%d s in %.1f s), load average %s\n", l, 100*t/hz/(w1-w0), t, hz, w1-w0, la }'
	rm -rf "$dir"
}

# await FILE PATTERN PID: waits for PATTERN (grep -P, \K before the value) in
# FILE while PID lives; prints the first match.
await() {
	local m
	for _ in $(seq 300); do
		if m=$(grep -oP "$2" "$1" 2>/dev/null | head -1) && [ -n "$m" ]; then
			echo "$m"
			return
		fi
		kill -0 "$3" 2>/dev/null || break
		sleep 0.1
	done
	cat "$1" >&2
	return 1
}

measure_group() { # measure_group BINARY LABEL
	local bin=$1 label=$2 dir ns ha nsp mp sp m0 s0 m1 s1 w0 w1 doors
	dir=$(mktemp -d "$scratch/group.XXXXXX")
	doors=(--http-listen 127.0.0.1:0 --amqp-listen 127.0.0.1:0 --kafka-listen 127.0.0.1:0)
	common="brokerClusterName=idle\nbrokerName=idle-a\nflushDiskType=SYNC_FLUSH\nminInSyncReplicas=2\n${CONF:-}"
	printf '%b\nbrokerRole=SYNC_MASTER\nbrokerId=0\n' "$common" >"$dir/master.conf"
	"$bin" namesrv --namesrv-listen 127.0.0.1:0 >"$dir/ns.log" 2>&1 &
	nsp=$!
	ns=$(await "$dir/ns.log" 'msg="NameServer listening" addr=\K\S+' "$nsp")
	"$bin" broker -n "$ns" -c "$dir/master.conf" --data-dir "$dir/master" --broker-listen 127.0.0.1:0 \
		--ha-listen 127.0.0.1:0 "${doors[@]}" >"$dir/master.log" 2>&1 &
	mp=$!
	ha=$(await "$dir/master.log" 'msg="replication listening" component=replication addr=\K\S+' "$mp")
	printf '%b\nbrokerRole=SLAVE\nbrokerId=1\nhaMasterAddress=%s\n' "$common" "$ha" >"$dir/slave.conf"
	"$bin" broker -n "$ns" -c "$dir/slave.conf" --data-dir "$dir/slave" --broker-listen 127.0.0.1:0 \
		"${doors[@]}" >"$dir/slave.log" 2>&1 &
	sp=$!
	await "$dir/master.log" 'msg="replication: replica in sync"' "$mp" >/dev/null
	sleep "$warmup"
	m0=$(cputicks "$mp") s0=$(cputicks "$sp") w0=$(date +%s.%N)
	sleep "$window"
	m1=$(cputicks "$mp") s1=$(cputicks "$sp") w1=$(date +%s.%N)
	kill -TERM "$mp" "$sp" "$nsp"
	wait "$mp" "$sp" "$nsp" || true
	for r in "master $((m1 - m0))" "slave $((s1 - s0))"; do
		set -- $r
		awk -v l="$label $1" -v t="$2" -v hz="$hz" -v w0="$w0" -v w1="$w1" -v la="$(cut -d' ' -f1-3 /proc/loadavg)" \
			'BEGIN { printf "%-12s %6.3f %% of one core (%d ticks of 1/%d s in %.1f s), load average %s\n", l, 100*t/hz/(w1-w0), t, hz, w1-w0, la }'
	done
	rm -rf "$dir"
}
if [ -n "${GROUP:-}" ]; then measure=measure_group; else measure=measure; fi

if [ $# -eq 0 ] && [ -n "${KEEL:-}" ]; then
	$measure "$KEEL" "$(basename "$KEEL")"
elif [ $# -eq 0 ]; then
	go build -o "$scratch/keel" ./cmd/keel
	$measure "$scratch/keel" "worktree"
else
	for rev in "$@"; do
		src=$(mktemp -d "$scratch/src.XXXXXX")
		git archive "$rev" | tar -x -C "$src"
		(cd "$src" && go build -o "$scratch/keel-$rev" ./cmd/keel)
		rm -rf "$src"
		$measure "$scratch/keel-$rev" "$(git rev-parse --short "$rev")"
	done
fi
