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
pids=()
cleanup() {
	for p in "${pids[@]}"; do
		kill "$p" 2>/dev/null || true
		wait "$p" 2>/dev/null || true
	done
	chmod -R u+w "$tmp" 2>/dev/null || true
	rm -rf "$tmp"
}

trap cleanup EXIT

cp -r "$src" "$tmp/franz-go"
chmod -R u+w "$tmp/franz-go"
go build -o "$tmp/keel" ./cmd/keel

# Tests that need what Keel does not offer (docs/kafka.md lists why):
# TestConsumeRegex and Test848RegexBrokerResolves expect Kafka's internal
# __consumer_offsets topic. The KIP-848 variants of the group tests run
# (ConsumerGroupHeartbeat v1 is advertised), and so does TestTxnEtl.
# Share-group and OAUTHBEARER tests skip themselves (ShareFetch is not
# advertised, KGO_TEST_OAUTH_SEEDS is not set); the SCRAM tests run
# against a second keel with aclEnable=true.
skip='^(TestConsumeRegex|Test848RegexBrokerResolves)$'

# TestIssueFetchLargerThanBrokerMaxReadBytes creates a topic with
# max.message.bytes=10485760, which Keel allows up to maxMessageSize.
# The first rebalance of each new group is not delayed, as Kafka brokers
# run for client test suites usually are (group.initial.rebalance.delay.ms=0):
# the suite makes hundreds of groups and the delay only slows it.
printf 'maxMessageSize=10485760\nkafkaGroupInitialRebalanceDelayMs=0\n' >"$tmp/broker.conf"
# A second broker with aclEnable=true serves the SCRAM tests
# (KGO_TEST_SCRAM_SEEDS): its one account is their user.
printf 'accounts:\n  - accessKey: kgo-scram\n    secretKey: kgo-scram-secret\n    admin: true\n' >"$tmp/plain_acl.yml"
printf 'aclEnable=true\naclFile=%s\n' "$tmp/plain_acl.yml" >"$tmp/acl.conf"

# serve NAME CONF: starts keel serve with CONF and sets addr to its Kafka
# listener.
serve() {
	mkdir -p "$tmp/$1"
	"$tmp/keel" serve -c "$2" --data-dir "$tmp/$1" --namesrv-listen 127.0.0.1:0 --broker-listen 127.0.0.1:0 \
		--http-listen "" --amqp-listen "" --kafka-listen 127.0.0.1:0 >"$tmp/$1.out" 2>"$tmp/$1.log" &
	local pid=$!
	pids+=("$pid")
	addr=""
	for _ in $(seq 1 200); do
		# The log may not exist yet: the shell opens it as the process starts.
		addr=$(sed -n 's/.*msg="Kafka listening" .*addr=\([^ ]*\).*/\1/p' "$tmp/$1.log" 2>/dev/null | head -n1 || true)
		[ -n "$addr" ] && return 0
		kill -0 "$pid" 2>/dev/null || { cat "$tmp/$1.log" >&2; exit 1; }
		sleep 0.1
	done
	echo "kafka-suite: keel ($1) did not report its Kafka listener" >&2
	cat "$tmp/$1.log" >&2
	exit 1
}
serve scram "$tmp/acl.conf"
scram_addr=$addr
serve data "$tmp/broker.conf"
echo "kafka-suite: franz-go $version against keel on $addr (SCRAM: $scram_addr)"

start=$(date +%s)
status=0
(
	cd "$tmp/franz-go/pkg/kgo"
	KGO_SEEDS="$addr" KGO_TEST_RF=1 KGO_TEST_RECORDS="${KGO_TEST_RECORDS:-5000}" KGO_TEST_MAX_TOPIC_PARTS="${KGO_TEST_MAX_TOPIC_PARTS:-8}" \
		KGO_TEST_SCRAM_SEEDS="$scram_addr" KGO_TEST_SCRAM="kgo-scram:kgo-scram-secret:512" \
		KGO_LOG_LEVEL="${KGO_LOG_LEVEL:-none}" GOFLAGS=-mod=mod \
		go test -count=1 -timeout "${SUITE_TIMEOUT:-20m}" -skip "$skip" "$@" .
) || status=$?
echo "kafka-suite: $(($(date +%s) - start)) s, exit $status"
if [ "$status" -ne 0 ]; then
	echo "--- keel log (last 60 lines) ---" >&2
	tail -n 60 "$tmp/data.log" >&2
fi
exit "$status"
