#!/usr/bin/env bash
# The protocol-neutral core against the revision before it: the five
# produce workloads, alternately on each, in this sitting (bench/compare.sh).
# KEEL_CORE_BEFORE (default 7d810b1) and KEEL_CORE_ROUNDS (default 2) override.
set -euo pipefail
cd "$(dirname "$0")/../.."
before=${KEEL_CORE_BEFORE:-7d810b1} rounds=${KEEL_CORE_ROUNDS:-2}
echo "## The protocol-neutral core: before and after"
echo
echo "Command: \`bench/compare.sh $before HEAD $rounds\` — each workload of bench/workloads runs 20 s on a broker embedded in keel bench, on $before (before the core was split from the RocketMQ adapter) then on this revision, $rounds rounds, alternately. The spread between the rounds of one revision is the machine's own noise; a difference inside it is not a change."
echo
bench/compare.sh "$before" HEAD "$rounds" 2>/dev/null | sed -n '/^| workload/,$p'
