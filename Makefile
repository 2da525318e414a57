# Single entry point for the usual tasks. CI runs .ci/run (vet, the README
# test command, short fuzzing).

GO ?= go
FUZZTIME ?= 20000x
BENCH ?= .
PKG ?= ./...

.PHONY: all build test race vet fuzz bench ci clean

all: vet test

build:
	$(GO) build -o keel ./cmd/keel

# The README test command.
test:
	$(GO) test ./...

race:
	$(GO) test -race $(PKG)

vet:
	$(GO) vet ./...
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

# Every fuzz target for FUZZTIME each (a count or a duration): make fuzz FUZZTIME=1m
fuzz:
	FUZZTIME=$(FUZZTIME) scripts/fuzz.sh

# Benchmarks only (no tests): make bench PKG=./internal/store/... BENCH=Append
bench:
	$(GO) test -run '^$$' -bench '$(BENCH)' -benchmem $(PKG)

ci:
	.ci/run

clean:
	rm -f keel
