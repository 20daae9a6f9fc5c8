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
//     (broker.go) and the deterministic synthetic broker with its fault
//     options (synthetic.go); the coinbase and binance adapters are not
//     written.
//   - The HMAC-signed AI coach client (coach.go).
//   - The sim (sim.go, marketdata.go, sim_http.go): hold vs actual P/L of
//     one trade over 1–90 days from the 1 h closes of market_bars or of the
//     deterministic synthetic vendor behind the marketdata rate limiter,
//     cached in Redis, with its API route (Sim.Routes) and metrics
//     sluice_trades_sim_requests_total and
//     sluice_trades_vendor_429_total (NewVendor429Counter, shared).
//   - The tables, in schemas/migrations (trades, broker_connections,
//     bias_tags, digests, market_bars).
//
// # What is not built yet
//
// No consumer group, runner, sink or topic is wired: the services
// trades-import, trades-score and trades-digest, their state stores
// (trades.import.state, trades.digest.state), timers and dead-lettering
// need runtime features that are not in stages/run yet. There is no
// declaration in the pipeline registry, no topic in the catalog, no CLI
// command or API route but the sim's (the sim's route is not mounted on an
// ops server yet), no metric but the sim's, no JSON Schema for these
// records, no record format for the import state, no Postgres or
// object-store sink.
package trades
