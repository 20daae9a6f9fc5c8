# sluice — see README.md. `make demo` and `make test` are the two commands a
# newcomer needs; everything else is for development.
GO ?= go
STACK_ENV = $(shell bash deploy/stack/env.sh 2>/dev/null)

# console-assets: see deploy/scripts/console-assets.sh
.PHONY: console-assets console-screenshots all build demo test test-race bench bench-runtime bench-silver bench-silver-peers bench-trades bench-modules chaos first-run lint stack-up stack-down ci clean

all: build

# -buildvcs=auto records the git commit for `sluice version` (it overrides a
# GOFLAGS=-buildvcs=false); -v names each package as it compiles, so a first
# build (minutes on a small machine) is never silent.
build: ## build bin/sluice
	@echo "building bin/sluice (modules download as needed; packages are listed as they compile; a first build takes minutes, later ones seconds)"
	$(GO) build -buildvcs=auto -v -o bin/sluice ./cmd/sluice
	@./bin/sluice version

demo: build ## run every pipeline end to end on embedded defaults (ARGS=--keep to stay up for kcat and the console)
	@echo "starting the demo: ./bin/sluice demo $(ARGS)"
	./bin/sluice demo $(ARGS)

console-screenshots: ## re-take docs/img/console-*.png with the console's browser test (needs chromium)
	SLUICE_SCREENSHOT_DIR=$(CURDIR)/docs/img $(GO) test ./internal/console/ -run TestConsoleInBrowser -count=1 -v

console-assets: ## refresh the console's vendored htmx and uPlot (with licences) from npm
	bash deploy/scripts/console-assets.sh

test: ## run every test; services come from the environment, local binaries, containers or fakes
	bash deploy/scripts/gotest.sh

test-race: ## the suite under the race detector
	bash deploy/scripts/gotest.sh -race

bench: bench-runtime bench-silver ## all benchmarks (bench-silver needs the real stack: make stack-up)

bench-runtime: ## runtime per-record overhead vs a bare kgo poll loop (kfake, in-process)
	$(GO) test ./stages/run/ -run '^$$' -bench RuntimePerRecord -benchtime 200000x -count 3 | tee bench/runtime.txt

bench-silver: ## silver pipeline vs the seed's SKIP LOCKED design vs the database ceiling (real Kafka + Postgres)
	bash bench/silver.sh

bench-silver-peers: ## bench-silver plus its peers side by side: Kafka Streams 4.4 (Java 17, Maven) and Watermill v1.5.1 (minutes); writes bench/results-silver-peers.md
	SILVER_OUT=$${SILVER_OUT:-bench/results-silver-peers.md} SILVER_ARGS="--variants acpmkw $${SILVER_ARGS:-}" bash bench/silver.sh

first-run: ## the README's first screen on a fresh clone: build, demo --keep, its exports, the commands it names, Ctrl-C
	bash deploy/scripts/firstrun.sh

chaos: ## silver, smap, ticks, trades, modules under faults (kill -9 of a member; broker, PostgreSQL, Redis restarts) on a private stack; 0 lost, 0 duplicated (CHAOS_PIPELINES, CHAOS_SCENARIOS)
	bash deploy/scripts/chaos.sh

bench-trades: ## trades digest: sluice's trades-digest vs a Kafka Streams 4.4.0 peer on 1.2 M trade.scored records, then the import, sim and digest SLOs (real stack, Java 17, Maven)
	bash bench/trades/run.sh

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
