#!/usr/bin/env bash
# A local failover cluster on loopback, in one step (docs/replication.md,
# "A failover on your machine"):
#
#   examples/failover/run.sh
#
# builds keel, starts three controller voters (bootstrapped), a NameServer
# and a group of three SYNC_MASTER brokers in controller mode, waits until
# the controllers elected a master, prints how to watch a failover, and
# stops everything on Ctrl-C (or SIGTERM to the script).
#
#   examples/failover/run.sh --check   start, wait for the master, stop (exit 0)
#
# Ports: KEEL_FAILOVER_BASE (default 9876) and the 19 after it:
#   BASE     NameServer (the examples' default -n 127.0.0.1:9876)
#   BASE+2.. controllers 9878, 9879, 9880; their /metrics on BASE+5..BASE+7
#   BASE+10  broker 1: remoting 9886, replication 9887, HTTP (/metrics) 9888
#   BASE+13  broker 2: 9889, 9890, 9891
#   BASE+16  broker 3: 9892, 9893, 9894
# Data and logs go to KEEL_FAILOVER_DIR (default: a new directory under
# $TMPDIR), kept after the stop.
set -euo pipefail

mode=run
case "${1:-}" in
--check) mode=check ;;
"") ;;
*)
	echo "usage: $0 [--check]" >&2
	exit 2
	;;
esac

base=${KEEL_FAILOVER_BASE:-9876}
root=$(cd "$(dirname "$0")/../.." && pwd)
work=${KEEL_FAILOVER_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/keel-failover.XXXXXX")}
mkdir -p "$work"
keel=$work/keel
host=127.0.0.1

ns=$host:$base
ctrl=("$host:$((base + 2))" "$host:$((base + 3))" "$host:$((base + 4))")
ctrl_http=("$host:$((base + 5))" "$host:$((base + 6))" "$host:$((base + 7))")
ctrl_list="${ctrl[0]};${ctrl[1]};${ctrl[2]}"
broker=() ha=() http=()
for i in 0 1 2; do
	broker+=("$host:$((base + 10 + 3 * i))")
	ha+=("$host:$((base + 11 + 3 * i))")
	http+=("$host:$((base + 12 + 3 * i))")
done

echo "building keel into $keel"
(cd "$root" && go build -o "$keel" ./cmd/keel)

pids=()
names=()
stop() {
	trap - EXIT INT TERM
	local live=()
	for pid in "${pids[@]}"; do
		kill -0 "$pid" 2>/dev/null && live+=("$pid")
	done
	if ((${#live[@]})); then
		echo
		echo "stopping ${#live[@]} processes"
		kill "${live[@]}" 2>/dev/null || true
		wait "${live[@]}" 2>/dev/null || true
	fi
	echo "stopped; data and logs are in $work"
}
trap stop EXIT
trap 'exit 130' INT TERM

# start NAME ARGS...: keel ARGS in the background, logging to NAME.log.
start() {
	local name=$1
	shift
	"$keel" "$@" >"$work/$name.log" 2>&1 &
	pids+=($!)
	names+=("$name")
}

cat >"$work/controller.conf" <<CONF
# Detect a silent master after 3 s (the default is 6 s).
controllerHeartBeatTimeoutMills=3000
CONF
start controller-0 controller -c "$work/controller.conf" --data-dir "$work/controller-0" \
	--controller-listen "${ctrl[0]}" --http-listen "${ctrl_http[0]}" --bootstrap="${ctrl[0]},${ctrl[1]},${ctrl[2]}"
for i in 1 2; do
	start "controller-$i" controller -c "$work/controller.conf" --data-dir "$work/controller-$i" \
		--controller-listen "${ctrl[$i]}" --http-listen "${ctrl_http[$i]}"
done
start namesrv namesrv --namesrv-listen "$ns"

cat >"$work/broker.conf" <<CONF
brokerClusterName=FailoverCluster
brokerName=broker-a
brokerRole=SYNC_MASTER
enableControllerMode=true
controllerAddr=$ctrl_list
minInSyncReplicas=2
flushDiskType=SYNC_FLUSH
brokerIP1=$host
kafkaListen=
amqpListen=
CONF
broker_cmd=()
for i in 0 1 2; do
	broker_cmd+=("$keel broker -c $work/broker.conf --data-dir $work/broker-$((i + 1)) -n $ns --broker-listen ${broker[$i]} --ha-listen ${ha[$i]} --http-listen ${http[$i]}")
	# shellcheck disable=SC2086 # the command line is split on purpose
	start "broker-$((i + 1))" ${broker_cmd[$i]#"$keel "}
done

status() { "$keel" controller status --controller-addr "$ctrl_list" --timeout 2s 2>/dev/null; }

echo "waiting for the controllers to elect a master (logs: $work/*.log)"
replica="" master=""
for _ in $(seq 1 600); do
	for j in "${!pids[@]}"; do
		if ! kill -0 "${pids[$j]}" 2>/dev/null; then
			echo "${names[$j]} exited; its log:" >&2
			tail -n 20 "$work/${names[$j]}.log" >&2
			exit 1
		fi
	done
	# The master's row of the status table: REPLICA master ADDRESS ...
	read -r replica master < <(status | awk '$2 == "master" { print $1, $3; exit }') || true
	[[ -n "${master:-}" ]] && break
	sleep 0.1
done
if [[ -z "${master:-}" ]]; then
	echo "no master elected within 60 s; the status:" >&2
	status >&2 || true
	exit 1
fi
mi=0
for i in 0 1 2; do
	[[ "${broker[$i]}" == "$master" ]] && mi=$i
done
echo "master elected: broker-$((mi + 1)) (replica $replica) at $master, pid ${pids[$((4 + mi))]}"
echo "MASTER=$master"

if [[ $mode == check ]]; then
	status
	exit 0
fi

cat <<TXT

Up: controllers ${ctrl[*]} (metrics: ${ctrl_http[*]}), NameServer $ns,
brokers ${broker[*]} (HTTP ${http[*]}) of group broker-a, all in $work.

Watch a failover, from the repository root in another terminal:

  $keel controller status --controller-addr "$ctrl_list"
  go run ./examples/producer -n $ns -count 5      # sent to the master
  kill -9 ${pids[$((4 + mi))]}                              # the master, broker-$((mi + 1))
  $keel controller status --controller-addr "$ctrl_list"
  go run ./examples/producer -n $ns -count 5      # the new master takes them

A new master is elected about 3 s after the kill (controllerHeartBeatTimeoutMills).
Bring the old master back; it rejoins as a slave:

  ${broker_cmd[$mi]} &

Ctrl-C here stops everything.
TXT
while true; do
	wait -n 2>/dev/null || true
	sleep 1
done
