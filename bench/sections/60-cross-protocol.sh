#!/usr/bin/env bash
# bench/sections/60-cross-protocol.sh: the cost of converting stored records
# for a consumer of another protocol (internal/translate); prints a markdown
# section to stdout.
#
#   bench/sections/60-cross-protocol.sh                  2 s per benchmark
#   KEEL_BENCH_SECONDS=5 bench/sections/60-cross-protocol.sh
#
# Each benchmark converts in one goroutine, on the CPU only (no store, no
# network): a stored Kafka batch of 100 records of 1 KiB (key, two headers;
# uncompressed, lz4, zstd) into the RocketMQ messages a pull carries; 100
# RocketMQ messages of 1 KiB into the records of a Kafka batch; one RocketMQ
# message into an AMQP delivery's properties and body.
set -euo pipefail
cd "$(dirname "$0")/../.."

secs="${KEEL_BENCH_SECONDS:-2}"
out=$(go test -count=1 -run '^$' -bench . -benchmem -benchtime "${secs}s" ./internal/translate/)

echo "## Cross-protocol conversion"
echo
echo "What a read costs when the consumer speaks another protocol than the producer"
echo "(docs/cross-protocol.md): CPU time per converted message, one core, no I/O."
echo
echo '```sh'
echo "go test -count=1 -run '^\$' -bench . -benchmem -benchtime ${secs}s ./internal/translate/"
echo '```'
echo
echo "| conversion | per message | MB/s (payload) | bytes allocated / message | allocations / message |"
echo "|---|---|---|---|---|"
echo "$out" | awk '
/^Benchmark/ {
	name = $1; sub(/^Benchmark/, "", name); sub(/-[0-9]+$/, "", name)
	per = (name ~ /^KafkaToRocketMQ|^RocketMQToKafka/) ? 100 : 1
	ns = ""; mbs = ""; b = ""; a = ""
	for (i = 2; i <= NF; i++) {
		if ($(i) == "ns/op") ns = $(i-1)
		if ($(i) == "MB/s") mbs = $(i-1)
		if ($(i) == "B/op") b = $(i-1)
		if ($(i) == "allocs/op") a = $(i-1)
	}
	label = name
	sub(/^KafkaToRocketMQ\//, "Kafka batch (", label); if (label != name) label = label ") → RocketMQ pull"
	if (name == "RocketMQToKafka") label = "RocketMQ message → Kafka fetch"
	if (name == "RocketMQToAMQP") label = "RocketMQ message → AMQP delivery"
	printf "| %s | %.2f µs | %s | %.0f | %.1f |\n", label, ns / per / 1000, mbs, b / per, a / per
}'
echo
echo "A native read (a consumer of the producer's protocol) converts nothing."
