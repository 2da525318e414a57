#!/usr/bin/env bash
# Idle CPU of keel serve with every door on and no client, this revision
# against the one before the idle loops parked (bench/idle.sh), alternately.
# KEEL_IDLE_BEFORE (default dcd5207) and KEEL_IDLE_ROUNDS (default 2) override;
# then an idle broker group (GROUP=1), against KEEL_IDLE_GROUP_BEFORE (default 2b19885).
set -euo pipefail
cd "$(dirname "$0")/../.."
before=${KEEL_IDLE_BEFORE:-dcd5207} rounds=${KEEL_IDLE_ROUNDS:-2}
revs=()
for _ in $(seq "$rounds"); do revs+=("$before" HEAD); done
echo "## Idle CPU: keel serve with every door on and no traffic"
echo
echo "Command: \`bench/idle.sh ${revs[*]}\` — keel serve with the NameServer, the broker, AMQP, HTTP and Kafka on loopback ports chosen at run time, a fresh data directory, no client; after 10 s, the process's own CPU time (utime+stime from /proc/PID/stat, 1/100 s ticks) over 60 s, as % of one core. Counting the process's own CPU time keeps the machine's other load out of the figure (it is not wall-clock utilisation); one tick in 60 s is 0.017 %. Target: ≤ 0.2 %."
echo
echo "| revision | % of one core | CPU ticks in the window | load average at the end |"
echo "|---|---|---|---|"
bench/idle.sh "${revs[@]}" 2>/dev/null | awk '{
	la = $0; sub(/.*load average /, "", la)
	t = $0; sub(/^[^(]*\(/, "", t); sub(/ ticks.*/, "", t)
	printf "| %s | %s %% | %s | %s |\n", $1, $2, t, la }'

# The same for a broker group: an idle SYNC_MASTER and its slave.
gbefore=${KEEL_IDLE_GROUP_BEFORE:-2b19885}
grevs=()
for _ in $(seq "$rounds"); do grevs+=("$gbefore" HEAD); done
echo
echo "### An idle broker group"
echo
echo "Command: \`GROUP=1 bench/idle.sh ${grevs[*]}\` — the same measurement for a broker group of three processes (\`keel namesrv\`; a SYNC_MASTER with \`minInSyncReplicas=2\` and its SYNC_FLUSH slave, each with every door on), from the moment the slave is in sync: the master's and the slave's own CPU time. $gbefore is the revision before an idle master's watch slept between writes."
echo
echo "| revision | process | % of one core | CPU ticks in the window | load average at the end |"
echo "|---|---|---|---|---|"
GROUP=1 bench/idle.sh "${grevs[@]}" 2>/dev/null | awk '{
	la = $0; sub(/.*load average /, "", la)
	t = $0; sub(/^[^(]*\(/, "", t); sub(/ ticks.*/, "", t)
	printf "| %s | %s | %s %% | %s | %s |\n", $1, $2, $3, t, la }'
