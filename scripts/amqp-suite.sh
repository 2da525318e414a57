#!/usr/bin/env bash
# amqp-suite.sh runs amqp091-go's own integration suite (integration_test.go
# and the connection-recovery tests of recovery_test.go, build tag
# integration) against a `keel serve` started on loopback ports chosen at
# run time, its AMQP management API included (the recovery tests close
# connections through it). The module source is the version go.mod requires,
# copied from the module cache to a temporary directory.
#
#   scripts/amqp-suite.sh            # the suite, minus SKIP below
#   SUITE_RUN='TestIntegrationConfirm' scripts/amqp-suite.sh   # one test
#
# Exit status: that of `go test`. Tests skipped on purpose are listed in
# SKIP with the reason (also in docs/amqp.md).
set -euo pipefail
cd "$(dirname "$0")/.."

# Tests of features Keel deliberately lacks. Keep in step with docs/amqp.md.
SKIP=(
  # Runs only against product "RabbitMQ" and expects basic.recover to
  # answer 540; Keel implements basic.recover (requeue). On any other
  # server it returns without closing its connection, which the suite's
  # goroutine-leak check then reports as a failure of the whole run.
  TestIntegrationRecoverNotImplemented
)

version=$(go list -m -f '{{.Version}}' github.com/rabbitmq/amqp091-go)
src=$(go mod download -json "github.com/rabbitmq/amqp091-go@$version" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
[ -d "$src" ] || { echo "amqp-suite: module source of amqp091-go $version not found" >&2; exit 2; }

work=$(mktemp -d)
pid=
cleanup() {
  if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  chmod -R u+w "$work" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

cp -r "$src" "$work/amqp091-go"
chmod -R u+w "$work/amqp091-go"
# The suite's RabbitMQ-only tests (queue TTL, basic.nack multiple) run
# only when the server's product property is "RabbitMQ"; Keel's is "Keel".
# Let them run against Keel too (and close their connection) instead of
# being skipped: the one change made to the copy.
sed -i 's/ok \&\& server == "RabbitMQ" {/ok \&\& (server == "RabbitMQ" || server == "Keel") {/' "$work/amqp091-go/integration_test.go"
grep -q 'server == "Keel"' "$work/amqp091-go/integration_test.go" ||
  { echo "amqp-suite: integrationRabbitMQ's product check not found; update the script" >&2; exit 2; }
go build -o "$work/keel" ./cmd/keel

mkdir "$work/data"
echo "amqpManagementListen=127.0.0.1:0" >"$work/broker.conf"
"$work/keel" serve -c "$work/broker.conf" --data-dir "$work/data" --namesrv-listen 127.0.0.1:0 --broker-listen 127.0.0.1:0 \
  --amqp-listen 127.0.0.1:0 --kafka-listen "" --http-listen "" 2>"$work/keel.log" &
pid=$!
addr=
mgmt=
for _ in $(seq 300); do
  addr=$(sed -n 's/.*msg="amqp listening" addr=\([^ ]*\).*/\1/p' "$work/keel.log" | head -1)
  mgmt=$(sed -n 's/.*msg="amqp management listening".* addr=\([^ ]*\).*/\1/p' "$work/keel.log" | head -1)
  [ -n "$addr" ] && [ -n "$mgmt" ] && break
  kill -0 "$pid" 2>/dev/null || { cat "$work/keel.log" >&2; echo "amqp-suite: keel serve exited" >&2; exit 2; }
  sleep 0.1
done
[ -n "$addr" ] && [ -n "$mgmt" ] || { cat "$work/keel.log" >&2; echo "amqp-suite: no AMQP or management listener after 30 s" >&2; exit 2; }
echo "amqp-suite: amqp091-go $version against keel serve on $addr (management API on $mgmt)"
# The recovery tests reach the management API at localhost:15672: point
# them at this run's port instead (the second change made to the copy).
sed -i "s#http://localhost:15672/#http://$mgmt/#; s#\"http://localhost:\"+port+#\"http://127.0.0.1:\"+port+#" "$work/amqp091-go/internal/utils/http.go"
sed -i "s#utils.DropConnection(url.PathEscape(targetConnName), \"15672\")#utils.DropConnection(url.PathEscape(targetConnName), \"${mgmt##*:}\")#" "$work/amqp091-go/recovery_test.go"
grep -q "$mgmt" "$work/amqp091-go/internal/utils/http.go" && grep -q "\"${mgmt##*:}\")" "$work/amqp091-go/recovery_test.go" ||
  { echo "amqp-suite: the recovery tests' management address not found; update the script" >&2; exit 2; }

# Every test of integration_test.go and recovery_test.go (the other files'
# integration tests need a TLS broker or RabbitMQ's own tooling).
names=$(sed -n 's/^func \(Test[A-Za-z0-9_]*\)(t \*testing\.T).*/\1/p' "$work/amqp091-go/integration_test.go" "$work/amqp091-go/recovery_test.go" | paste -sd'|')
run="^(${SUITE_RUN:-$names})\$"
skip="^($(IFS='|'; echo "${SKIP[*]}"))\$"

start=$(date +%s)
status=0
(cd "$work/amqp091-go" && AMQP_URL="amqp://guest:guest@$addr/" GOFLAGS=-mod=mod \
  go test -tags integration -count=1 -timeout 10m -run "$run" -skip "$skip" ${SUITE_FLAGS:-} .) || status=$?
echo "amqp-suite: go test exit $status in $(( $(date +%s) - start )) s"
if [ "$status" -ne 0 ]; then
  echo "--- keel serve log (tail) ---"
  tail -50 "$work/keel.log"
fi
exit "$status"
