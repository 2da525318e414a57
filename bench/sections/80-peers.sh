#!/usr/bin/env bash
# bench/sections/80-peers.sh: Keel's three front doors against the brokers a
# user would pick instead that install here (RabbitMQ quorum queues and
# streams, NATS JetStream), one workload, each broker through its own usual
# client; prints a markdown section with one table to stdout.
#
#   bench/sections/80-peers.sh            5 s warm-up + 20 s measured per broker (about 6 min)
#   bench/sections/80-peers.sh --quick    2 s + 5 s per broker (about 2 min)
#
# The workload: 1 KiB messages (random bytes, the send time in the first 8),
# 4 producers with 256 unacknowledged messages each, 4 consumers taking
# them while they are produced. One broker at a time, each new (fresh data
# directory, ports chosen at run time on 127.0.0.1), stopped and its data
# removed after its run:
#   Keel Kafka door     franz-go, acks=all, idempotent, its own batching, topic of 8 partitions
#   Keel RocketMQ door  the official Go client, async sends, push consumers, topic of 8 queues;
#                       once at the defaults, once with commitDelayMicros=1000, once
#                       with flushDiskType=ASYNC_FLUSH (acknowledged before fdatasync,
#                       as NATS's default and RabbitMQ streams are)
#   Keel AMQP door      amqp091-go, publisher confirms, durable quorum queue, manual acks
#   RabbitMQ quorum     the same amqp091-go driver (Debian's rabbitmq-server)
#   RabbitMQ stream     its stream client, one stream per producer/consumer pair
#   NATS JetStream      nats.go, async publish, one durable pull consumer; once with
#                       the default sync_interval, once with sync_interval: always
# The drivers are bench/peers, a module of its own (the peers' clients are
# not Keel's dependencies); this script builds it and nats-server from it.
# Broker CPU per message: user+system time (/proc/PID/stat) of the broker's
# processes over the measured window, divided by the messages acknowledged
# in it (each of which is also delivered).
#
# Environment: KEEL_BENCH_DIR (scratch data; default a temporary directory
# under /var/tmp), PEERS_WARMUP and PEERS_DURATION (override the phases),
# PEERS_ONLY (a space-separated subset of: kafka rocketmq rocketmq-delay
# rocketmq-async amqp quorum stream nats nats-always).
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)

warmup=5s duration=20s mode=""
if [ "${1:-}" = "--quick" ]; then warmup=2s duration=5s mode=" --quick"; fi
warmup=${PEERS_WARMUP:-$warmup}
duration=${PEERS_DURATION:-$duration}
only=${PEERS_ONLY:-kafka rocketmq rocketmq-delay rocketmq-async amqp quorum stream nats nats-always}
base="${KEEL_BENCH_DIR:-/var/tmp}"
mkdir -p "$base"
work=$(mktemp -d "$base/peers-bench.XXXXXX")
pid="" rabbit_pid=""
stop_pid() {
	if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
	pid=""
}
stop_rabbit() {
	if [ -n "$rabbit_pid" ]; then
		# rabbitmq-server runs in its own process group (setsid): stop it all.
		kill -TERM -- "-$rabbit_pid" 2>/dev/null || true
		for _ in $(seq 100); do kill -0 "$rabbit_pid" 2>/dev/null || break; sleep 0.1; done
		kill -KILL -- "-$rabbit_pid" 2>/dev/null || true
		wait "$rabbit_pid" 2>/dev/null || true
		# The Erlang port mapper daemonizes out of that group: stop the one
		# this run started (on its own port).
		epmd -port "$ERL_EPMD_PORT" -kill >/dev/null 2>&1 || true
	fi
	rabbit_pid=""
}
cleanup() { stop_pid; stop_rabbit; rm -rf "$work"; }
trap cleanup EXIT

log() { echo "80-peers: $*" >&2; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
wants() { case " $only " in *" $1 "*) return 0 ;; esac; return 1; }

log "building keel, bench/peers and nats-server"
go build -o "$work/keel" ./cmd/keel
(cd bench/peers && go test -c -o "$work/peers.test" . && go build -o "$work/nats-server" github.com/nats-io/nats-server/v2)

# drive NAME DRIVER ADDR PIDS [VAR=VALUE ...]: one measured run into $work/NAME.json.
drive() {
	local name=$1 drv=$2 addr=$3 pids=$4
	shift 4
	log "$name: $drv driver on $addr (broker pids $pids), $warmup + $duration"
	env KEEL_PEER_DRIVER="$drv" KEEL_PEER_ADDR="$addr" KEEL_PEER_PIDS="$pids" KEEL_PEER_OUT="$work/$name.json" \
		KEEL_PEER_WARMUP="$warmup" KEEL_PEER_DURATION="$duration" "$@" \
		"$work/peers.test" -test.run '^TestPeer$' -test.timeout 10m >"$work/$name.out" 2>&1 ||
		{ tail -40 "$work/$name.out" >&2; log "$name failed"; exit 1; }
}

# keel_serve DOOR [LINE...]: a new keel serve with only that door (and, for
# the RocketMQ door, its NameServer) listening, the LINEs added to its
# broker.conf; sets pid and addr.
keel_serve() {
	local door=$1 data="$work/keel-$1" kafka="" amqp=""
	shift
	rm -rf "$data"
	printf 'diskMaxUsedSpaceRatio=90\ndiskSpaceWarningLevelRatio=95\n' >"$work/broker.conf"
	[ "$#" -gt 0 ] && printf '%s\n' "$@" >>"$work/broker.conf"
	grep -q '^flushDiskType=' "$work/broker.conf" || echo flushDiskType=SYNC_FLUSH >>"$work/broker.conf"
	[ "$door" = kafka ] && kafka=127.0.0.1:0
	[ "$door" = amqp ] && amqp=127.0.0.1:0
	"$work/keel" serve -c "$work/broker.conf" --data-dir "$data" --namesrv-listen 127.0.0.1:0 --broker-listen 127.0.0.1:0 \
		--http-listen "" --amqp-listen "$amqp" --kafka-listen "$kafka" >"$work/keel-$door.out" 2>"$work/keel-$door.log" &
	pid=$!
	addr=""
	for _ in $(seq 300); do
		case $door in
		kafka) addr=$(sed -n 's/.*msg="Kafka listening" .*addr=\([^ ]*\).*/\1/p' "$work/keel-$door.log" | head -n1) ;;
		amqp) addr=$(sed -n 's/.*msg="amqp listening" addr=\([^ ]*\).*/\1/p' "$work/keel-$door.log" | head -n1) ;;
		rocketmq) grep -q 'msg="broker listening"' "$work/keel-$door.log" &&
			addr=$(sed -n 's/.*msg="NameServer listening" addr=\([^ ]*\).*/\1/p' "$work/keel-$door.log" | head -n1) ;;
		esac
		[ -n "$addr" ] && return 0
		kill -0 "$pid" 2>/dev/null || { cat "$work/keel-$door.log" >&2; exit 1; }
		sleep 0.1
	done
	log "keel serve did not report its $door listener"
	exit 1
}

if wants kafka; then
	keel_serve kafka
	drive kafka kafka "$addr" "$pid"
	stop_pid
	rm -rf "$work/keel-kafka"
	bench/fill-page-cache.sh --top-up "${KEEL_BENCH_DIR:-/var/tmp/keel-bench}"
fi
# rocketmq NAME [LINE...]: the RocketMQ door, LINEs added to broker.conf.
rocketmq() {
	local name=$1 topic="peer-bench-$$"
	shift
	keel_serve rocketmq "$@"
	# The broker registers with its NameServer just after it listens.
	for i in $(seq 100); do
		"$work/keel" topic create -n "$addr" --queues 8 "$topic" >/dev/null 2>&1 && break
		[ "$i" = 100 ] && { log "keel topic create $topic failed"; exit 1; }
		sleep 0.1
	done
	drive "$name" rocketmq "$addr" "$pid" KEEL_PEER_TOPIC="$topic"
	stop_pid
	rm -rf "$work/keel-rocketmq"
	bench/fill-page-cache.sh --top-up "${KEEL_BENCH_DIR:-/var/tmp/keel-bench}"
}
wants rocketmq && rocketmq rocketmq
wants rocketmq-delay && rocketmq rocketmq-delay commitDelayMicros=1000
wants rocketmq-async && rocketmq rocketmq-async flushDiskType=ASYNC_FLUSH
if wants amqp; then
	keel_serve amqp
	drive amqp amqp "amqp://guest:guest@$addr/" "$pid"
	stop_pid
	rm -rf "$work/keel-amqp"
	bench/fill-page-cache.sh --top-up "${KEEL_BENCH_DIR:-/var/tmp/keel-bench}"
fi

rversion=""
if wants quorum || wants stream; then
	if ! [ -x /usr/lib/rabbitmq/bin/rabbitmq-server ]; then
		log "installing rabbitmq-server"
		apt-get install -y rabbitmq-server >&2
	fi
	rversion=$(dpkg-query -W -f '${Version}' rabbitmq-server 2>/dev/null || echo unknown)
	rport=$(free_port) sport=$(free_port)
	mkdir -p "$work/rabbit/mnesia" "$work/rabbit/log" "$work/rabbit/home"
	echo "[rabbitmq_stream]." >"$work/rabbit/enabled_plugins"
	export RABBITMQ_NODE_IP_ADDRESS=127.0.0.1 RABBITMQ_NODE_PORT=$rport RABBITMQ_DIST_PORT=$(free_port) \
		ERL_EPMD_PORT=$(free_port) RABBITMQ_NODENAME="keelpeers$$@localhost" \
		RABBITMQ_MNESIA_BASE="$work/rabbit/mnesia" RABBITMQ_LOG_BASE="$work/rabbit/log" \
		RABBITMQ_ENABLED_PLUGINS_FILE="$work/rabbit/enabled_plugins" RABBITMQ_CONFIG_FILE="$work/rabbit/rabbitmq" \
		HOME="$work/rabbit/home"
	# A free-disk limit that a scratch disk meets, so that RabbitMQ does not
	# block publishers; the stream listener on its own runtime port.
	cat >"$work/rabbit/rabbitmq.conf" <<EOF
disk_free_limit.absolute = 50MB
stream.listeners.tcp.1 = 127.0.0.1:$sport
stream.advertised_host = 127.0.0.1
stream.advertised_port = $sport
EOF
	setsid /usr/lib/rabbitmq/bin/rabbitmq-server >"$work/rabbit/server.out" 2>&1 &
	rabbit_pid=$!
	up=""
	for _ in $(seq 900); do
		if python3 -c "import socket,sys; s=socket.socket(); s.settimeout(0.2); sys.exit(s.connect_ex(('127.0.0.1', $sport)))" 2>/dev/null; then
			up=1; break
		fi
		kill -0 "$rabbit_pid" 2>/dev/null || break
		sleep 0.1
	done
	[ -n "$up" ] || { tail -30 "$work/rabbit/server.out" >&2; log "rabbitmq-server did not listen"; exit 1; }
	sleep 2 # the listeners open before the boot finishes
	# The broker is every process of its group (beam.smp and its helpers).
	rpids=$(ps -o pid= -g "$rabbit_pid" | tr -s ' \n' ',' | sed 's/^,//; s/,$//')
	log "RabbitMQ $rversion on 127.0.0.1:$rport (stream $sport), processes $rpids"
	wants quorum && drive quorum amqp "amqp://guest:guest@127.0.0.1:$rport/" "$rpids"
	wants stream && drive stream stream "rabbitmq-stream://guest:guest@127.0.0.1:$sport/%2f" "$rpids"
	stop_rabbit
	rm -rf "$work/rabbit"
	bench/fill-page-cache.sh --top-up "${KEEL_BENCH_DIR:-/var/tmp/keel-bench}"
fi

# nats NAME SYNC: a new nats-server with JetStream (sync_interval SYNC, or
# the default when empty).
nats() {
	local name=$1 sync=$2 port
	port=$(free_port)
	mkdir -p "$work/$name"
	{
		echo "listen: 127.0.0.1:$port"
		echo "jetstream {"
		echo "  store_dir: \"$work/$name/store\""
		[ -n "$sync" ] && echo "  sync_interval: $sync"
		echo "}"
	} >"$work/$name/nats.conf"
	"$work/nats-server" -c "$work/$name/nats.conf" >"$work/$name/server.log" 2>&1 &
	pid=$!
	for i in $(seq 300); do
		python3 -c "import socket,sys; s=socket.socket(); s.settimeout(0.2); sys.exit(s.connect_ex(('127.0.0.1', $port)))" 2>/dev/null && break
		kill -0 "$pid" 2>/dev/null || { cat "$work/$name/server.log" >&2; exit 1; }
		[ "$i" = 300 ] && { log "nats-server did not listen"; exit 1; }
		sleep 0.1
	done
	drive "$name" nats "nats://127.0.0.1:$port" "$pid"
	stop_pid
	rm -rf "${work:?}/$name"
	bench/fill-page-cache.sh --top-up "${KEEL_BENCH_DIR:-/var/tmp/keel-bench}"
}
nversion=$("$work/nats-server" --version 2>/dev/null | sed 's/^nats-server: //' || echo unknown)
wants nats && nats nats ""
wants nats-always && nats nats-always always

rev=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
python3 - "$work" "$rev" "$rversion" "$nversion" "$warmup" "$duration" "$mode" $only <<'EOF'
import json, os, sys
work, rev, rversion, nversion, warmup, duration, mode = sys.argv[1:8]
rows = {
    "kafka": ("Keel Kafka door (franz-go, acks=all, idempotent)", "yes: after the group-commit fdatasync (SYNC_FLUSH)"),
    "rocketmq": ("Keel RocketMQ door (official Go client)", "yes: after the group-commit fdatasync (SYNC_FLUSH)"),
    "rocketmq-delay": ("Keel RocketMQ door, commitDelayMicros=1000 (official Go client)", "yes: after the group-commit fdatasync (SYNC_FLUSH)"),
    "rocketmq-async": ("Keel RocketMQ door, flushDiskType=ASYNC_FLUSH (official Go client)", "no: written, fdatasync every flushIntervalCommitLog (500 ms)"),
    "amqp": ("Keel AMQP door (amqp091-go, confirms)", "yes: after the group-commit fdatasync (SYNC_FLUSH)"),
    "quorum": ("RabbitMQ %s quorum queue (amqp091-go, confirms)" % rversion, "yes: after Ra's WAL fsync"),
    "stream": ("RabbitMQ %s stream (rabbitmq-stream-go-client)" % rversion, "no: written, not fsynced"),
    "nats": ("NATS JetStream %s, default sync_interval (nats.go)" % nversion, "no: fsync every 2 min"),
    "nats-always": ("NATS JetStream %s, sync_interval: always (nats.go)" % nversion, "yes: fsync per write"),
}
print("## Keel's doors against RabbitMQ and NATS JetStream\n")
print("```sh\nbench/sections/80-peers.sh%s   # %s warm-up + %s measured per broker\n```\n" % (mode, warmup, duration))
print("One workload for every broker, each through its own usual client (bench/peers): 1 KiB messages (random bytes), "
      "4 producers each keeping 256 messages unacknowledged, 4 consumers taking them while they are produced; "
      "one broker at a time, each new, on this machine's loopback, clients and broker sharing its cores. "
      "Keel: `keel serve` (SYNC_FLUSH, but ASYNC_FLUSH in the row so named), revision %s, one door listening per run; the Kafka topic has 8 partitions, "
      "the RocketMQ topic 8 queues, the AMQP queues are durable quorum queues with persistent messages and manual acks. "
      "RabbitMQ streams: one stream per producer, read by one consumer each. NATS: one file-stored stream (1 replica), "
      "one durable pull consumer shared by the consumers, explicit acks. "
      "Publish msg/s: messages acknowledged to their producers in the measured window; e2e: send to delivery; "
      "broker CPU: user+system time of the broker's processes over the window divided by the messages acknowledged in it.\n" % rev)
print("| broker (client) | an ack means fsync | publish msg/s | delivered msg/s | e2e p50 ms | e2e p99 ms | broker CPU µs/msg | errors |")
print("|---|---|---:|---:|---:|---:|---:|---:|")
notes = []
for name in sys.argv[8:]:
    label, fsync = rows[name]
    p = os.path.join(work, name + ".json")
    r = json.load(open(p))
    print("| %s | %s | %.0f | %.0f | %.2f | %.1f | %.1f | %d |" % (label, fsync, r["publish_msgs_per_sec"], r["deliver_msgs_per_sec"],
          r["e2e_p50_ms"], r["e2e_p99_ms"], r["broker_cpu_us_per_msg"], r["errors"]))
    if r.get("first_error"):
        notes.append("%s: first error: `%s`" % (label, r["first_error"]))
if notes:
    print("\n" + "\n\n".join(notes))
EOF
