# sluice — see README.md. `make demo` and `make test` are the two commands a
# newcomer needs; everything else is for development.
GO ?= go
STACK_ENV = $(shell bash deploy/stack/env.sh 2>/dev/null)

.PHONY: all build demo test test-race bench bench-runtime bench-silver bench-modules lint stack-up stack-down ci clean

all: build

build: ## build bin/sluice
	$(GO) build -o bin/sluice ./cmd/sluice

demo: ## run every pipeline end to end on embedded defaults (ARGS=--keep to stay up for kcat)
	$(GO) run ./cmd/sluice demo $(ARGS)

test: ## run every test; services come from the environment, local binaries, containers or fakes
	bash deploy/scripts/gotest.sh

test-race: ## the suite under the race detector
	bash deploy/scripts/gotest.sh -race

bench: bench-runtime bench-silver ## all benchmarks (bench-silver needs the real stack: make stack-up)

bench-runtime: ## runtime per-record overhead vs a bare kgo poll loop (kfake, in-process)
	$(GO) test ./stages/run/ -run '^$$' -bench RuntimePerRecord -benchtime 200000x -count 3 | tee bench/runtime.txt

bench-silver: ## silver pipeline vs the seed's SKIP LOCKED design vs the database ceiling (real Kafka + Postgres)
	bash bench/silver.sh

bench-modules: ## modules: the seed's refresh locks vs sluice's modules-refresh, one workload and upstream (real Postgres; Kafka for sluice)
	bash bench/modules.sh

lint: ## gofmt + go vet
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

stack-up: ## start the local real stack (Kafka KRaft, Postgres, Redis, MinIO); prints the env file
	bash deploy/stack/up.sh

stack-down: ## stop the local real stack
	bash deploy/stack/down.sh

ci: ## what CI runs: provision the stack, then make test
	CI=true bash .ci/run

clean:
	rm -rf bin .test-output .sluice
