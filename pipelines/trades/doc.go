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
//   - The tables, in schemas/migrations (trades, broker_connections,
//     bias_tags, digests, market_bars).
//
// # Services
//
// trades-score (scoresvc.go) turns import.completed and score.request into
// bias_tags, trade.scored and coach.reflect; trades-digest (digestsvc.go)
// keeps weekly windows in the runtime's state store (trades.digest.state)
// and emits digest objects, digests rows and digest.ready from a periodic
// timer or a digest.request. Declare (declare.go) declares them as the
// pipeline "trades"; requests.go sends their requests (CLI, POST
// /api/v1/trades/digests). docs/pipelines/trades-score-digest.md states
// their contracts.
//
// # What is not built yet
//
// The trades-import service and its state (trades.import.state), the
// coinbase and binance adapters, JSON Schemas of these records, market
// data beyond the market_bars table, and sim.
package trades
