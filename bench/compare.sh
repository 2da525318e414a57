#!/usr/bin/env bash
# bench/compare.sh: the same produce workloads on two revisions, alternately,
# in one sitting, so that a change's effect can be told from the machine's
# run-to-run spread. Prints a markdown table (messages/s, MB/s, send p99 per
# run) and the raw disk figures of the same sitting.
#
#   bench/compare.sh BEFORE AFTER [ROUNDS]      e.g. bench/compare.sh 7d810b1 HEAD 2
#
# Each revision is built from a temporary worktree; every workload runs on a
# broker embedded in keel bench (as bench/run.sh's embedded workloads do,
# with the same broker.conf) for 20 s after its warm-up, BEFORE then AFTER,
# ROUNDS times (default 2). Run it on an otherwise quiet machine.
# Environment: KEEL_BENCH_DIR (scratch data; default /var/tmp/keel-bench),
# KEEL_COMPARE_WORKLOADS (default: the five produce workloads).
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 2 ] || { sed -n 2,14p "$0" >&2; exit 2; }
before=$1 after=$2 rounds=${3:-2}
workloads=${KEEL_COMPARE_WORKLOADS:-"sync-async-send sync-batch async-batch sync-64-senders sync-one-sender"}
data=${KEEL_BENCH_DIR:-/var/tmp/keel-bench}/compare
work=$(mktemp -d)
trap 'git worktree remove --force "$work/src" >/dev/null 2>&1 || true; rm -rf "$work" "$data"' EXIT
mkdir -p "$work/out" "$data"
for rev in "$before" "$after"; do
	git worktree add -q --detach "$work/src" "$rev"
	(cd "$work/src" && go build -o "$work/keel-$(git rev-parse --short HEAD)" ./cmd/keel)
	git worktree remove --force "$work/src"
done
b=$(git rev-parse --short "$before") a=$(git rev-parse --short "$after")
printf 'diskMaxUsedSpaceRatio=90\ndiskSpaceWarningLevelRatio=95\ncommitLogPageCacheBytes=1073741824\n' >"$work/embedded.conf"
for round in $(seq "$rounds"); do
	for w in $workloads; do
		flush=$(sed -n 's/^flushDiskType: *\([A-Z_]*\).*/\1/p' "bench/workloads/$w.yaml")
		for rev in "$b" "$a"; do
			echo "round $round: $w on $rev" >&2
			"$work/keel-$rev" bench -w "bench/workloads/$w.yaml" -o json --embedded "$flush" -c "$work/embedded.conf" \
				--data-dir "$data/$rev-$w" --duration 20s >"$work/out/$round-$w-$rev.json" 2>"$work/out/$round-$w-$rev.log"
			rm -rf "$data/$rev-$w"
		done
	done
done
"$work/keel-$a" bench disk --dir "$data/disk" --seq-bytes 1GiB --sync-mib-writes 64 --sync-4k-writes 1000
python3 - "$work/out" "$b" "$a" "$rounds" $workloads <<'PY'
import json, sys
out, b, a, rounds, ws = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5:]
def cell(w, rev):
    runs = []
    for r in range(1, rounds + 1):
        s = json.load(open(f"{out}/{r}-{w}-{rev}.json"))["send"]
        runs.append(f"{s['msgs_per_sec']:,.0f} msg/s, {s['mb_per_sec']:.1f} MB/s, p99 {s['latency']['p99_ns']/1e6:.2f} ms"
                    + (f", {s['errors']} errors" if s["errors"] else ""))
    return " / ".join(runs)
print(f"| workload | {b} (runs in order) | {a} (runs in order) |")
print("|---|---|---|")
for w in ws:
    print(f"| {w} | {cell(w, b)} | {cell(w, a)} |")
PY
