// Package modules is the domain layer of the modules pipeline: upstream
// market data (options flow, dark pool prints, short interest, price
// action) and its analyses are cached per ticker × module, their freshness
// derived from a per-module catalog rather than stored. One owner per key
// replaces the original design's SQL locks: every request of a key
// TICKER:module lands in one partition of modules.refresh, whose owner
// alone writes that key's state to the compacted modules.state, fenced by
// (epoch, version); a mirror applies the states to Postgres.
//
// # What is built
//
//   - Keys (key.go): Key, SplitKey, NormalizeTicker (ASCII upper-casing,
//     as the tickers' CITEXT compares them).
//   - Rules (rules.go): the rule ids modules.ticker, modules.module,
//     modules.unknown_module, modules.request, modules.key,
//     modules.upstream_rejected, modules.snapshot_too_large (sanity_fail),
//     modules.upstream (a retry whose exhaustion is retries_exhausted) and
//     modules.analyzer.<module> (exception), as check functions returning
//     stages dead letters.
//   - The modules.refresh record (refresh.go): RefreshRequest,
//     DecodeRefresh (a stages.Decoder; decode_error for what is not a JSON
//     object) and RefreshRecord.Validate, which applies the rules in order
//     (ticker, module, request, unknown_module, key) and reports a record
//     key that differs from the request's only in letter case as one to
//     re-key rather than dead-letter.
//   - The modules.state record (state.go): State with its lease and
//     analysis, its fencing token (the runtime's run.Token), the
//     transitions Refreshing, Ready and Failed (a failure keeps the last
//     good data), DecodeState, and StateStoreConfig (restore keeps the
//     greatest token).
//   - The catalog (catalog.go): Module and LoadCatalog, which reads
//     analysis_catalog.
//   - Freshness and the refresh gate (gate.go): FreshnessOf and
//     CanServeStale, the Go twins of the view ticker_modules_status, and
//     Gate, which decides fetch, analysis only, skip as fresh or skip in
//     the error cooldown (DefaultErrorCooldown).
//   - InputHash over CanonicalJSON (hash.go) and the analysis jobs'
//     IdempotencyKey (jobs.go).
//   - Upstream sources (source.go): the ModuleSource interface, the
//     classification of failures (ClassifyUpstreamError, UpstreamResult)
//     and the call policy constants; the deterministic Synthetic source
//     with ParseFaults for MODULES_SYNTHETIC_FAULTS (synthetic.go,
//     faults.go); the Unusual Whales adapter UW (uw.go).
//   - MirrorTable (mirror.go): the pgsink description of
//     ticker_data_modules as modules-mirror writes it, fenced by
//     (state_epoch, state_version).
//   - The tables, views and get_or_create_job, in schemas/migrations
//     (00007_modules.sql).
//   - The services (service.go, refresher.go, pg.go): modules-refresh —
//     rules, re-keying, the gate on the key's state (the runtime's state
//     store over modules.state, restored with FoldState), a lease written
//     with PutNow before a rate-limited upstream call, snapshot and
//     analysis in one PostgreSQL transaction, then ready or error — and
//     modules-mirror, which applies modules.state to ticker_data_modules
//     with MirrorTable under a coalescing window. Declare (declare.go)
//     registers them as the pipeline "modules" (sluice run modules).
//   - Config (config.go) with ApplyEnv for MODULES_SOURCE, UW_BASE_URL,
//     UW_API_KEY, MODULES_RATE_LIMIT, MODULES_ERROR_COOLDOWN,
//     MODULES_SYNTHETIC_LATENCY and MODULES_SYNTHETIC_FAULTS; the Analyzer
//     interface and one deterministic rule analyzer per module
//     (analyzer.go); the sluice_modules_* metrics (metrics.go).
//   - Assemble and the API (assemble.go, api.go, synth.go): Assembler
//     reads ticker_modules_status, gets or creates the analysis job of the
//     modules missing, stale, expired or absent (get_or_create_job with
//     IdempotencyKey) and, only when it created the job, produces one
//     refresh request per such module (reason assemble); it serves each
//     module's snapshot and analysis when fresh or within max_stale, lists
//     the others as missing, and adds a Synthesizer's text (Template, the
//     deterministic one; Fallback tries another, an LLM say, in the time
//     left and falls back to Template) unless it misses the budget
//     (DefaultAssembleBudget), never waiting for a refresh. Routes mounts
//     POST /api/v1/modules/refresh (alias POST /ingest/{module}),
//     GET /api/v1/modules/status, POST /api/v1/modules/analysis (alias
//     POST /ai/ticker-activity-analysis) and GET /api/v1/modules/jobs/{id};
//     bad input is 400 with its rule id; MountAPI mounts them on the ops
//     server with a producer of their own. The CLI is `sluice modules`.
//   - DemoScenario (demo.go), the part of `sluice demo`: a stampede of
//     refresh requests of one key (one upstream call), then an assemble of
//     its ticker and the job it created.
//
// docs/pipelines/modules.md describes the pipeline as a whole,
// docs/pipelines/modules-assemble.md assemble, the API and the CLI.
//
// # What is not built yet
//
// No LLM client (Fallback is the plumbing for one), no JSON Schema for
// these records; the UW adapter reports no data date.
package modules
