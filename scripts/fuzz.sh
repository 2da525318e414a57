#!/usr/bin/env bash
# Runs every fuzz target of the module for a short time each.
#
#   scripts/fuzz.sh            # FUZZTIME per target, default 20000x (executions)
#   FUZZTIME=1m scripts/fuzz.sh ./internal/config/
#
# The default is a count, not a duration: with a duration, Go 1.26's fuzz
# coordinator can report "context deadline exceeded" as a failure when the
# time runs out while a worker is busy (golang/go#75804, fixed in Go 1.27),
# which on a loaded 2-core machine makes a clean run fail now and then.
#
# The decoders' targets (internal/remoting, internal/amqp/wire,
# internal/replication) also measure what each input allocates and fail,
# reporting the bytes allocated per input byte, an input that allocates
# more than its decoder's bound (docs/security.md, "Decoding bounds").
#
# Targets are found per package with `go test -list`, so a new Fuzz function
# is picked up without editing this script. New crashers are written to the
# package's testdata/fuzz/ by go test; commit them as regression seeds.
set -euo pipefail
cd "$(dirname "$0")/.."

fuzztime="${FUZZTIME:-20000x}"
if [ "$#" -gt 0 ]; then
	pkgs=("$@")
else
	# Only packages whose test files declare a fuzz target.
	mapfile -t dirs < <(grep -rl --include='*_test.go' -E '^func Fuzz[A-Z0-9_]' . | xargs -r -n1 dirname | sort -u)
	pkgs=("${dirs[@]/%//}")
fi

ran=0
for pkg in "${pkgs[@]}"; do
	[ -n "$pkg" ] || continue
	mapfile -t targets < <(go test -list '^Fuzz' -run '^$' "$pkg" | grep -E '^Fuzz' || true)
	for t in "${targets[@]}"; do
		echo "fuzz $pkg $t ($fuzztime)"
		go test -run '^$' -fuzz "^${t}\$" -fuzztime "$fuzztime" "$pkg"
		ran=$((ran + 1))
	done
done
echo "fuzz: $ran targets ran for $fuzztime each"
