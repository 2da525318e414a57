#!/usr/bin/env bash
# bench/run.sh: measure Keel on this machine and write docs/benchmarks.md.
#
#   bench/run.sh                full run; run it on an otherwise quiet machine
#   bench/run.sh --quick        every workload about 3 s, small disk probe: checks the
#                               machinery; writes bench/out/benchmarks-quick.md (provisional)
#   bench/run.sh --out FILE     write the document elsewhere
#   bench/run.sh --only "a b"   run only these workloads (names of bench/workloads/*.yaml)
#
# What it does, in order, all in one run so the figures belong together:
#   1. builds keel; records the machine (nproc, CPU, memory, kernel, disk, Go, date, revision)
#   2. keel bench disk: the raw disk figures, on the disk that holds the data
#   3. go test -bench: the store, de-duplication, and the send and pull paths
#   4. every workload of bench/workloads against a broker embedded in keel bench
#      (--embedded with the workload's flushDiskType, data under $KEEL_BENCH_DIR)
#   5. compare-clients (lean client, then the official Go client via bench/official),
#      backlog-drain and many-topics against a separate `keel serve` process, to read
#      the broker's memory (VmHWM) and time its restart after a clean shutdown,
#      after SIGKILL with the log those runs left, and after SIGKILL under a load
#   6. keel bench report: the document, each figure next to the command that made it;
#      the part below "<!-- sections -->" (bench/sections.sh, side-by-side comparisons
#      run in a sitting of their own) is kept as it was
#
# Every broker runs with diskMaxUsedSpaceRatio=90 and diskSpaceWarningLevelRatio=95
# (bench.conf, shown in the document): the defaults, 75 and 90, count the filesystem's
# reserved blocks as used, and on a disk already near 75 % a workload's own data
# made retention delete the oldest segments mid-run (a backlog drain then lost the
# data it was draining). Both still protect the disk.
#
# The brokers embedded in keel bench also keep only 1 GiB of the CommitLog's page
# cache (commitLogPageCacheBytes, embedded.conf, also shown): on a virtual machine
# whose host backs memory on first touch and takes freed memory back (the machine
# table shows the kernel's free page reporting setting), writes
# into never-used memory are several times slower than into reused pages
# (BenchmarkBufferedWrite; docs/performance.md, "Page-cache window"). The separate
# broker keeps 6 GiB (serve.conf, shown): its backlog drain is measured with the
# 4 GiB backlog (4.6 GB of CommitLog with the record headers) in the page cache.
#
# Environment: KEEL_BENCH_DIR (scratch data; default /var/tmp/keel-bench; must be on
# the disk you want to measure), KEEL_BENCH_NS_PORT / KEEL_BENCH_BROKER_PORT
# (the `keel serve` ports, default 19876 / 20911).
set -euo pipefail

cd "$(dirname "$0")/.."
root=$(pwd)

quick=""
out=""
only=""
while [ $# -gt 0 ]; do
	case "$1" in
	--quick) quick="--quick" ;;
	--out) out="$2"; shift ;;
	--only) only="$2"; shift ;;
	-h|--help) sed -n '2,25p' "$0"; exit 0 ;;
	*) echo "bench/run.sh: unknown argument $1" >&2; exit 2 ;;
	esac
	shift
done
if [ -z "$out" ]; then
	out="docs/benchmarks.md"
	[ -n "$quick" ] && out="bench/out/benchmarks-quick.md"
fi

# The order of the workload table in docs/benchmarks.md.
embedded_workloads="sync-async-send sync-batch async-batch sync-64-senders sync-one-sender e2e-paced e2e-half-max"
process_workloads="compare-clients backlog-drain many-topics"

data="${KEEL_BENCH_DIR:-/var/tmp/keel-bench}"
work="$root/bench/out"
rm -rf "$work/results"
mkdir -p "$work/results" "$data" "$(dirname "$out")"
keel="$work/keel"

log() { echo "bench/run.sh: $*" >&2; }
wanted() { [ -z "$only" ] || [[ " $only " == *" $1 "* ]]; }
now_ns() { date +%s%N; }

log "building keel"
go build -o "$keel" ./cmd/keel
rev=$(git rev-parse HEAD)
if [ -n "$(git status --porcelain --untracked-files=no)" ]; then rev="$rev (with uncommitted changes)"; fi

# --- 1. machine ------------------------------------------------------------
printf 'diskMaxUsedSpaceRatio=90\ndiskSpaceWarningLevelRatio=95\n' >"$work/bench.conf"
{ cat "$work/bench.conf"; printf 'commitLogPageCacheBytes=1073741824\n'; } >"$work/embedded.conf"
machine_row() { # label, command
	local v
	v=$(bash -c "$2" 2>&1 | tr '\n' ' ' | sed 's/  */ /g; s/^ *//; s/ *$//; s/|/\\|/g')
	echo "| $1 | \`${2//|/\\|}\` | $v |"
}
{
	echo "| what | command | value |"
	echo "|---|---|---|"
	machine_row "CPUs" "nproc"
	machine_row "CPU model" "grep -m1 'model name' /proc/cpuinfo | cut -d: -f2"
	machine_row "memory" "grep MemTotal /proc/meminfo"
	machine_row "free page reporting to the host (kernel command line)" "grep -o 'page_reporting[.a-z_]*=[0-9]*' /proc/cmdline || echo none"
	machine_row "kernel" "uname -srm"
	machine_row "data filesystem" "df -hT $data | tail -1"
	machine_row "block devices" "lsblk -dno NAME,MODEL,SIZE,ROTA"
	machine_row "Go" "go version"
	machine_row "date" "date -u +%Y-%m-%dT%H:%M:%SZ"
	machine_row "revision" "git rev-parse HEAD"
	machine_row "load average at the start (1, 5, 15 min)" "cut -d' ' -f1-3 /proc/loadavg"
	machine_row "data disk use as Keel counts it (blocks not available to it, %)" "stat -f -c '%b %a' $data | awk '{printf \"%.1f\", (\$1-\$2)*100/\$1}'"
	machine_row "broker.conf of every broker (bench.conf)" "cat $work/bench.conf"
	machine_row "broker.conf of the brokers embedded in keel bench (embedded.conf)" "cat $work/embedded.conf"
} >"$work/machine.md"

# --- 2. raw disk figures ---------------------------------------------------
disk_args=()
[ -n "$quick" ] && disk_args=(--seq-bytes 256MiB --sync-mib-writes 32 --sync-4k-writes 500)
log "disk probe in $data"
"$keel" bench disk --dir "$data" "${disk_args[@]}" -o json >"$work/disk.json"

# --- 3. go test -bench -----------------------------------------------------
benchtime="2s"
[ -n "$quick" ] && benchtime="300x"
# The store (append and read on this disk), de-duplication cost, buffered
# writes into new and into cached pages (docs/performance.md), and the
# send and pull paths over loopback against an in-process broker.
gobench_cmd="go test -run '^\$' -bench . -benchtime=$benchtime -count=1 ./internal/store/ ./internal/broker/dedup/ ./internal/diskprobe/ && go test -run '^\$' -bench 'SendPath|PullPath' -benchtime=$benchtime -count=1 ./internal/bench/"
log "$gobench_cmd"
{
	go test -run '^$' -bench . -benchtime="$benchtime" -count=1 ./internal/store/ ./internal/broker/dedup/ ./internal/diskprobe/ &&
		go test -run '^$' -bench 'SendPath|PullPath' -benchtime="$benchtime" -count=1 ./internal/bench/
} >"$work/gobench.txt" 2>&1 || log "go test -bench failed (output kept in the document)"

# --- 4. workloads against an embedded broker ------------------------------
results=()
failed=()
flush_of() { sed -n 's/^flushDiskType: *\([A-Z_]*\).*/\1/p' "bench/workloads/$1.yaml"; }

# run_bench NAME ARGS...: one keel bench run whose JSON result goes to results/NAME.json.
run_bench() {
	local name=$1
	shift
	log "workload $name"
	if ! "$keel" bench -w "bench/workloads/$name.yaml" -o json $quick "$@" >"$work/results/$name.json" 2>"$work/results/$name.log"; then
		log "workload $name failed; see $work/results/$name.log"
		failed+=("$name")
	fi
	tail -n 3 "$work/results/$name.log" >&2 || true
	if [ -s "$work/results/$name.json" ]; then results+=("$work/results/$name.json"); fi
}

# run_official NAME: the same workload through the official Go client (bench/official).
run_official() {
	log "workload $1 through the official Go client"
	if ! KEEL_BENCH_WORKLOAD="$root/bench/workloads/$1.yaml" KEEL_BENCH_NAMESRV="127.0.0.1:$ns_port" \
		KEEL_BENCH_BROKER_FLUSH=ASYNC_FLUSH KEEL_BENCH_OUT="$work/results/$1-official.json" KEEL_BENCH_QUICK="$quick" \
		go test -count=1 -run TestOfficialClient -timeout 30m ./bench/official >"$work/results/$1-official.log" 2>&1; then
		log "official client run failed; see $work/results/$1-official.log"
		failed+=("$1-official")
	fi
	if [ -s "$work/results/$1-official.json" ]; then results+=("$work/results/$1-official.json"); fi
}

for name in $embedded_workloads; do
	wanted "$name" || continue
	rm -rf "$data/$name"
	run_bench "$name" --embedded "$(flush_of "$name")" -c "$work/embedded.conf" --data-dir "$data/$name"
	rm -rf "$data/$name"
done

# --- 5. a separate broker process: memory and restart ------------------------
listening() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
free_port() { # first port from $1 up that nothing listens on
	local p=$1
	while listening "$p"; do p=$((p + 1)); done
	echo "$p"
}
ns_port="${KEEL_BENCH_NS_PORT:-$(free_port 19876)}"
br_port="${KEEL_BENCH_BROKER_PORT:-$(free_port 20911)}"
serve_pid=""
# start_serve starts keel serve and waits until its broker port accepts
# (the store recovers before the listeners open); fails if it exits first.
start_serve() {
	"$keel" serve -c "$work/serve.conf" --data-dir "$data/proc" --log-level warn \
		--namesrv-listen "127.0.0.1:$ns_port" --broker-listen "127.0.0.1:$br_port" >>"$work/serve.log" 2>&1 &
	serve_pid=$!
	until listening "$br_port"; do
		if ! kill -0 "$serve_pid" 2>/dev/null; then
			log "keel serve exited; see $work/serve.log"
			tail -n 5 "$work/serve.log" >&2
			exit 1
		fi
		sleep 0.01
	done
}
stop_serve() { # signal
	kill "-$1" "$serve_pid" 2>/dev/null || true
	wait "$serve_pid" 2>/dev/null || true
	serve_pid=""
}
trap '[ -n "$serve_pid" ] && kill -KILL "$serve_pid" 2>/dev/null; true' EXIT

process_ran=""
for name in $process_workloads; do wanted "$name" && process_ran=1; done
if [ -n "$process_ran" ]; then
	rm -rf "$data/proc"
	{ printf 'flushDiskType=ASYNC_FLUSH\n'; cat "$work/bench.conf"; printf 'commitLogPageCacheBytes=6442450944\n'; } >"$work/serve.conf"
	serve_cmd="keel serve -c serve.conf (flushDiskType=ASYNC_FLUSH, bench.conf and commitLogPageCacheBytes=6442450944) --data-dir DIR --namesrv-listen 127.0.0.1:$ns_port --broker-listen 127.0.0.1:$br_port"
	: >"$work/serve.log"
	log "starting $serve_cmd"
	start_serve
	process_names=""
	for name in $process_workloads; do
		wanted "$name" || continue
		run_bench "$name" --namesrv "127.0.0.1:$ns_port" --broker-flush ASYNC_FLUSH
		process_names="$process_names $name"
		if [ "$name" = compare-clients ]; then run_official "$name"; fi
	done
	hwm=$(awk '/VmHWM/ {printf "%.0f MiB", $2/1024}' "/proc/$serve_pid/status")
	rss=$(awk '/VmRSS/ {printf "%.0f MiB", $2/1024}' "/proc/$serve_pid/status")
	log_bytes=$(du -sb "$data/proc/commitlog" | cut -f1)
	log_human=$(awk -v b="$log_bytes" 'BEGIN {printf "%.2f GiB", b/1073741824}')

	stop_serve TERM
	t0=$(now_ns)
	start_serve
	clean_ms=$((($(now_ns) - t0) / 1000000))

	stop_serve KILL
	t0=$(now_ns)
	start_serve
	kill_ms=$((($(now_ns) - t0) / 1000000))

	# The same, killed in the middle of a load: the checkpoint then lags and
	# Open re-dispatches what it did not cover.
	load_secs=10
	[ -n "$quick" ] && load_secs=2
	log "SIGKILL ${load_secs} s into a many-topics load"
	"$keel" bench -w bench/workloads/many-topics.yaml --namesrv "127.0.0.1:$ns_port" --broker-flush ASYNC_FLUSH \
		--warmup 0s --duration 10m -q >"$work/kill-load.log" 2>&1 &
	load_pid=$!
	sleep "$load_secs"
	stop_serve KILL
	t0=$(now_ns)
	start_serve
	load_kill_ms=$((($(now_ns) - t0) / 1000000))
	kill "$load_pid" 2>/dev/null || true
	wait "$load_pid" 2>/dev/null || true
	stop_serve TERM
	rm -rf "$data/proc"

	{
		echo "## Broker process: memory and restart"
		echo
		echo "One \`keel serve\` process (\`$serve_cmd\`) served the workloads$process_names"
		echo "(their commands are in their sections, with --namesrv 127.0.0.1:$ns_port). Then:"
		echo
		echo "| figure | value | target | how |"
		echo "|---|---|---|---|"
		echo "| peak RSS of the broker process | $hwm (now $rss) | ≤ 400 MiB | VmHWM and VmRSS of /proc/PID/status after the runs |"
		echo "| CommitLog size | $log_human | 4 GiB | \`du -sb DIR/commitlog\` |"
		echo "| restart after clean shutdown | $clean_ms ms | ≤ 1 s (first set at 2 s; raised) | SIGTERM, wait for exit, start \`keel serve\` again, time until the broker port accepts |"
		echo "| restart after SIGKILL | $kill_ms ms | ≤ 2 s (first set at 15 s; raised) | SIGKILL, wait for exit, start again, time until the broker port accepts |"
		echo "| restart after SIGKILL under load | $load_kill_ms ms | ≤ 2 s (first set at 15 s; raised) | SIGKILL $load_secs s into \`keel bench -w bench/workloads/many-topics.yaml --namesrv ...\`, start again, time until the broker port accepts |"
		echo
		echo "The broker port opens only after the store has recovered (store first, then the listeners)."
	} >"$work/process.md"
else
	: >"$work/process.md"
fi

if [ ${#failed[@]} -gt 0 ]; then
	{
		echo
		echo "**Failed runs:** ${failed[*]} (their logs: bench/out/results/NAME.log)."
	} >>"$work/process.md"
fi

# The load average says whether other work shared the machine during the run.
{
	echo
	echo "Load average at the end of the run (\`cut -d' ' -f1-3 /proc/loadavg\`): $(cut -d' ' -f1-3 /proc/loadavg). It includes the benchmark's own processes (the broker and the load generator keep both cores busy), so it is high by design; the figure at the start shows what ran before the benchmark."
} >>"$work/process.md"

# --- 6. the document --------------------------------------------------------
report_args=(--disk "$work/disk.json" --machine "$work/machine.md" --extra "$work/process.md"
	--gobench "$work/gobench.txt" --gobench-command "$gobench_cmd" --revision "$rev" --out "$out")
[ -n "$quick" ] && report_args+=(--quick)
if [ ${#results[@]} -eq 0 ]; then
	log "no results"
	exit 1
fi
# The side-by-side sections (bench/sections.sh) are their own sitting: keep them.
rm -f "$work/sections-kept.md"
if [ -f "$out" ] && grep -q '^<!-- sections -->$' "$out"; then
	sed -n '/^<!-- sections -->$/,$p' "$out" >"$work/sections-kept.md"
fi
"$keel" bench report "${report_args[@]}" "${results[@]}"
if [ -s "$work/sections-kept.md" ]; then
	{ echo; cat "$work/sections-kept.md"; } >>"$out"
fi
log "wrote $out"
[ ${#failed[@]} -eq 0 ]
