#!/usr/bin/env bash
# Runs franz-go's own integration tests (pkg/kgo) against a fresh `keel serve`.
#
#   scripts/kafka-suite.sh                  # the whole suite minus SKIP below
#   scripts/kafka-suite.sh -run 'TestGroupETL|TestIssue325'   # extra go test flags
#   KGO_TEST_RECORDS=2000 scripts/kafka-suite.sh
#
# The franz-go version is the one go.mod requires; its module is copied from
# the module cache to a temporary directory (the cache is read-only). Keel
# listens on loopback ports chosen at run time (":0", read back from its log).
# The skipped tests and why are listed in docs/kafka.md ("franz-go's suite").
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

version=$(go list -m -f '{{.Version}}' github.com/twmb/franz-go)
src=$(go mod download -json "github.com/twmb/franz-go@$version" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
[ -d "$src" ] || { echo "kafka-suite: franz-go $version not in the module cache" >&2; exit 1; }

tmp=$(mktemp -d)
pid=""
cleanup() {
	if [ -n "$pid" ]; then
		kill "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	fi
	chmod -R u+w "$tmp" 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT

cp -r "$src" "$tmp/franz-go"
chmod -R u+w "$tmp/franz-go"
go build -o "$tmp/keel" ./cmd/keel

# Tests that need what Keel does not offer (docs/kafka.md lists why):
# TestTxnEtl needs transactions; TestConsumeRegex expects Kafka's internal
# __consumer_offsets topic. KIP-848, share-group, SCRAM and OAUTHBEARER
# tests skip themselves (their APIs are not advertised, or their
# KGO_TEST_* variables are not set).
skip='^(TestTxnEtl|TestConsumeRegex)$'

mkdir -p "$tmp/data"
# TestIssueFetchLargerThanBrokerMaxReadBytes creates a topic with
# max.message.bytes=10485760, which Keel allows up to maxMessageSize.
printf 'maxMessageSize=10485760\n' >"$tmp/broker.conf"
"$tmp/keel" serve -c "$tmp/broker.conf" --data-dir "$tmp/data" --namesrv-listen 127.0.0.1:0 --broker-listen 127.0.0.1:0 \
	--http-listen "" --amqp-listen "" --kafka-listen 127.0.0.1:0 >"$tmp/keel.out" 2>"$tmp/keel.log" &
pid=$!
addr=""
for _ in $(seq 1 200); do
	addr=$(sed -n 's/.*msg="Kafka listening" .*addr=\([^ ]*\).*/\1/p' "$tmp/keel.log" | head -n1)
	[ -n "$addr" ] && break
	kill -0 "$pid" 2>/dev/null || { cat "$tmp/keel.log" >&2; exit 1; }
	sleep 0.1
done
[ -n "$addr" ] || { echo "kafka-suite: keel did not report its Kafka listener" >&2; cat "$tmp/keel.log" >&2; exit 1; }
echo "kafka-suite: franz-go $version against keel on $addr"

start=$(date +%s)
status=0
(
	cd "$tmp/franz-go/pkg/kgo"
	KGO_SEEDS="$addr" KGO_TEST_RF=1 KGO_TEST_RECORDS="${KGO_TEST_RECORDS:-5000}" KGO_TEST_MAX_TOPIC_PARTS="${KGO_TEST_MAX_TOPIC_PARTS:-8}" \
		KGO_LOG_LEVEL="${KGO_LOG_LEVEL:-none}" GOFLAGS=-mod=mod \
		go test -count=1 -timeout "${SUITE_TIMEOUT:-20m}" -skip "$skip" "$@" .
) || status=$?
echo "kafka-suite: $(($(date +%s) - start)) s, exit $status"
if [ "$status" -ne 0 ]; then
	echo "--- keel log (last 60 lines) ---" >&2
	tail -n 60 "$tmp/keel.log" >&2
fi
exit "$status"
