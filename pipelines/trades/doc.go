// Package trades is the domain layer of the trades pipeline: a
// user's broker trades are imported, scored for behavioural biases and
// summed up in weekly digests. Every topic is keyed by user_id.
//
// # What is built
//
//   - Record formats: the commands of trades.import (import, push and the
//     internal page; DecodeCommand), raw trades as brokers return them
//     (RawTrade: numbers or decimal strings), the event envelope
//     {event_id, type, timestamp, payload} with the payloads of
//     trades.events, trades.bias, coach.reflect and digest.ready
//     (DecodeEvent, DecodePayload, DecodeTradeScored), and the
//     deterministic ids (ImportID, PushImportID, TradeID and the *EventID
//     functions). Malformed records are stages dead letters with reason
//     decode_error or unknown_task_type.
//   - The rules that need no I/O (rules.go, Normalize), each failing as a
//     sanity_fail dead letter carrying its rule id.
//   - Exact decimals (decimal.go): FIFO realized P/L per (user, symbol)
//     with the SELL's fee split pro rata over its lots (Ledger), and the v1
//     bias labels overtrading, revenge_trading and size_escalation over a
//     user's history (Score).
//   - ISO-week digest windows, their object keys and store keys
//     (window.go), and the digest aggregate as a pure function of a
//     window's contributions (Aggregate).
//   - AES-GCM sealing of broker tokens under BROKER_TOKEN_KEY (tokens.go).
//   - The BrokerAdapter interface with the classification of fetch errors
//     (broker.go), the deterministic synthetic broker with its fault
//     options (synthetic.go) and the coinbase and binance HTTP adapters
//     (coinbase.go, binance.go: the subset of each API they use is in
//     their doc comments).
//   - The trades-import service (importer.go, service.go): the import
//     state in the runtime's state store (ImportState, changelog
//     trades.import.state), runs chained page by page, trades upserted in
//     one transaction per page, events on trades.events, failures in
//     trades.dlq; its metrics (sluice_trades_*); the imports API and
//     client (Imports: POST /api/v1/trades/imports, GET
//     /api/v1/trades/imports/{import_id}); the declaration (Declare, the
//     pipeline "trades" of sluice run). docs/pipelines/trades.md describes
//     it.
//   - The HMAC-signed AI coach client (coach.go).
//   - The sim (sim.go, marketdata.go, sim_http.go): hold vs actual P/L of
//     one trade over 1–90 days from the 1 h closes of market_bars or of the
//     deterministic synthetic vendor behind the marketdata rate limiter,
//     cached in Redis, with its API route (Sim.Routes) and metrics
//     sluice_trades_sim_requests_total and
//     sluice_trades_vendor_429_total (NewVendor429Counter, shared).
//   - The services trades-score (scoresvc.go: import.completed and
//     score.request into bias_tags, trade.scored and coach.reflect) and
//     trades-digest (digestsvc.go: weekly windows in the runtime's state
//     store, changelog trades.digest.state, emitted as digest objects,
//     digests rows and digest.ready by a periodic timer or a
//     digest.request), declared in Declare's list; requests.go sends their
//     requests (CLI, POST /api/v1/trades/digests).
//     docs/pipelines/trades-score-digest.md states their contracts.
//   - The demo scenario of sluice demo (demo.go: DemoScenario, a synthetic
//     import and a push of a known bias pattern, DemoPushTrades, followed
//     to bias_tags and the week's digests).
//   - The tables, in schemas/migrations (trades, broker_connections,
//     bias_tags, digests, market_bars).
//
// # What is not built yet
//
// JSON Schemas for these records and market data beyond market_bars
// (the score's sparkline and the coach's series read market_bars only).
package trades
