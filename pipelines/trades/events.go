package trades

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/stages"
)

// Event types. trades.events carries TypeTradeUpserted, TypeImportProgress,
// TypeImportCompleted, TypeImportFailed and TypeScoreRequest;
// trades.bias carries TypeTradeScored and TypeDigestRequest; coach.reflect
// and digest.ready carry the type of their name. Every one is keyed by
// user_id.
const (
	TypeTradeUpserted   = "trade.upserted"
	TypeImportProgress  = "import.progress"
	TypeImportCompleted = "import.completed"
	TypeImportFailed    = "import.failed"
	TypeScoreRequest    = "score.request"
	TypeTradeScored     = "trade.scored"
	TypeDigestRequest   = "digest.request"
	TypeCoachReflect    = "coach.reflect"
	TypeDigestReady     = "digest.ready"
)

// knownType reports whether t is an event type this package decodes.
func knownType(t string) bool {
	switch t {
	case TypeTradeUpserted, TypeImportProgress, TypeImportCompleted, TypeImportFailed, TypeScoreRequest,
		TypeTradeScored, TypeDigestRequest, TypeCoachReflect, TypeDigestReady:
		return true
	}
	return false
}

// Event is the envelope of every trades event: {event_id, type, timestamp,
// payload}. Event ids are deterministic (see the *EventID functions), so a
// consumer drops a redelivered event by its id.
type Event[P any] struct {
	EventID   string    `json:"event_id"`
	Type      string    `json:"type"`
	Timestamp time.Time `json:"timestamp"`
	Payload   P         `json:"payload"`
}

// TradeFields are the fields of a stored trade that trade.upserted and
// trade.scored carry (flattened into their payloads).
type TradeFields struct {
	TradeID string    `json:"trade_id"`
	UserID  string    `json:"user_id"`
	Broker  string    `json:"broker"`
	ExtID   string    `json:"ext_id"`
	Symbol  string    `json:"symbol"`
	Side    Side      `json:"side"`
	Qty     Exact     `json:"qty"`
	Price   Exact     `json:"price"`
	Fee     Exact     `json:"fee"`
	TS      time.Time `json:"ts"`
}

// FieldsOf returns t's fields as events carry them.
func FieldsOf(t Trade) TradeFields {
	return TradeFields{
		TradeID: t.ID, UserID: t.UserID, Broker: t.Broker, ExtID: t.ExtID, Symbol: t.Symbol, Side: t.Side,
		Qty: Exact{t.Qty}, Price: Exact{t.Price}, Fee: Exact{t.Fee}, TS: t.TS,
	}
}

// TradeUpserted is the payload of trade.upserted: a trade as stored, and
// the import that stored it.
type TradeUpserted struct {
	TradeFields
	ImportID string `json:"import_id"`
}

// NewTradeUpserted is the trade.upserted event of t stored by importID.
func NewTradeUpserted(t Trade, importID string, at time.Time) Event[TradeUpserted] {
	return Event[TradeUpserted]{
		EventID: TradeUpsertedEventID(t), Type: TypeTradeUpserted, Timestamp: at.UTC(),
		Payload: TradeUpserted{TradeFields: FieldsOf(t), ImportID: importID},
	}
}

// ImportProgress is the payload of import.progress, sent after each page
// (event id ProgressEventID). Fetched, Stored and Rejected count the run's
// trades so far; Percent is the broker's, else EstimatePercent.
type ImportProgress struct {
	ImportID string `json:"import_id"`
	RunID    string `json:"run_id"`
	Page     int    `json:"page"`
	Percent  int    `json:"percent"`
	Fetched  int    `json:"fetched"`
	Stored   int    `json:"stored"`
	Rejected int    `json:"rejected"`
}

// ImportCompleted is the payload of import.completed (event id
// CompletedEventID); trades-score scores the user's trades since Since.
type ImportCompleted struct {
	ImportID string `json:"import_id"`
	RunID    string `json:"run_id"`
	UserID   string `json:"user_id"`
	Since    string `json:"since"`
	Pages    int    `json:"pages"`
	Fetched  int    `json:"fetched"`
	Stored   int    `json:"stored"`
	Rejected int    `json:"rejected"`
}

// ImportFailed is the payload of import.failed (event id FailedEventID):
// Reason and Rule are the dead letter's dlq.reason and dlq.rule.
type ImportFailed struct {
	ImportID string `json:"import_id"`
	RunID    string `json:"run_id"`
	Reason   string `json:"reason"`
	Rule     string `json:"rule"`
}

// ScoreRequest is the payload of score.request: score the user's trades
// with ts >= Since (YYYY-MM-DD or RFC 3339).
type ScoreRequest struct {
	UserID string `json:"user_id"`
	Since  string `json:"since"`
}

// LotPnL is one matched lot of a SELL: the quantity it closed of one
// opening BUY, its P/L after its pro-rata share of the SELL's fee, and the
// union of the BUY's and the SELL's labels (sorted).
type LotPnL struct {
	Qty    Exact    `json:"qty"`
	PnL    Fixed8   `json:"pnl"`
	Labels []string `json:"labels"`
}

// TradeScored is the payload of trade.scored, one per scored trade. Labels
// are the trade's label names (sorted); for a SELL, Lots are its matched
// lots (FIFO order) and LotLabels the union of the labels of the BUYs they
// opened with (sorted). RealizedPnL is 0 for a BUY. A nil RealizedPnL is
// absent (rule trades.scored). The digest aggregates these payloads.
type TradeScored struct {
	TradeFields
	RealizedPnL *Fixed8  `json:"realized_pnl"`
	LotLabels   []string `json:"lot_labels"`
	Labels      []string `json:"labels"`
	Lots        []LotPnL `json:"lots"`
}

// DigestRequest is the payload of digest.request: emit the user's digest of
// the ISO week starting PeriodStart (YYYY-MM-DD, a Monday) now, partial
// when the week has not ended.
type DigestRequest struct {
	UserID      string `json:"user_id"`
	PeriodStart string `json:"period_start"`
}

// LabelConfidence is a label with its confidence, as coach.reflect shows it.
type LabelConfidence struct {
	Name       string  `json:"name"`
	Confidence float64 `json:"confidence"`
}

// Tones of a coach's insight.
const (
	ToneSupportive = "supportive"
	ToneStrict     = "strict"
)

// CoachReflect is the payload of coach.reflect (event id ReflectEventID),
// once per (trade, label set).
type CoachReflect struct {
	TradeID   string            `json:"trade_id"`
	Labels    []LabelConfidence `json:"labels"`
	Insight   string            `json:"insight"`
	Sparkline []float64         `json:"sparkline"`
	Tone      string            `json:"tone"`
}

// Period is a digest's window as dates: Start inclusive, End exclusive.
type Period struct {
	Start string `json:"start"`
	End   string `json:"end"`
}

// DigestReady is the payload of digest.ready (event id DigestReadyEventID),
// once per (user, period, revision). DigestID is the digests row's id.
type DigestReady struct {
	DigestID  int64  `json:"digest_id"`
	UserID    string `json:"user_id"`
	Period    Period `json:"period"`
	Revision  int    `json:"revision"`
	ObjectKey string `json:"object_key"`
	Partial   bool   `json:"partial"`
}

// DecodeEvent reads an envelope, leaving the payload as JSON: a value that
// is not UTF-8 or not a JSON object (or whose envelope fields have the
// wrong type) is a decode_error; a missing type, or one this package does
// not know, is an unknown_task_type. A consumer that skips other types
// checks Type before using the payload.
func DecodeEvent(value []byte) (Event[json.RawMessage], error) {
	if _, err := decodeObject(value); err != nil {
		return Event[json.RawMessage]{}, err
	}
	var e Event[json.RawMessage]
	if err := json.Unmarshal(value, &e); err != nil {
		return Event[json.RawMessage]{}, decodeError("event", err)
	}
	if e.Type == "" {
		return e, stages.DeadLetter(stages.ReasonUnknownTaskType, "", errors.New("trades event: type is missing"))
	}
	if !knownType(e.Type) {
		return e, stages.DeadLetter(stages.ReasonUnknownTaskType, "", fmt.Errorf("trades event: unknown type %q", clip(e.Type)))
	}
	return e, nil
}

// DecodePayload decodes the payload of e as P; a mismatch is a
// decode_error.
func DecodePayload[P any](e Event[json.RawMessage]) (P, error) {
	var p P
	if err := json.Unmarshal(e.Payload, &p); err != nil {
		return p, decodeError(e.Type+" payload", err)
	}
	return p, nil
}

// DecodeTradeScored decodes a trade.scored payload and applies
// trades.scored: the payload must be an object with trade_id, ts, side and
// realized_pnl; any of them missing or of the wrong type fails the rule,
// and other malformed fields are a decode_error.
func DecodeTradeScored(payload json.RawMessage) (TradeScored, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(payload, &fields); err != nil || fields == nil {
		return TradeScored{}, sanity(RuleScored, "trade.scored payload is not an object")
	}
	var probe struct {
		TradeID     string     `json:"trade_id"`
		TS          *time.Time `json:"ts"`
		Side        Side       `json:"side"`
		RealizedPnL *Fixed8    `json:"realized_pnl"`
	}
	for name, dst := range map[string]any{
		"trade_id": &probe.TradeID, "ts": &probe.TS, "side": &probe.Side, "realized_pnl": &probe.RealizedPnL,
	} {
		if raw, ok := fields[name]; ok {
			if err := json.Unmarshal(raw, dst); err != nil {
				return TradeScored{}, sanity(RuleScored, "trade.scored %s: %v", name, err)
			}
		}
	}
	var s TradeScored
	s.TradeID, s.Side, s.RealizedPnL = probe.TradeID, probe.Side, probe.RealizedPnL
	if probe.TS != nil {
		s.TS = *probe.TS
	}
	if err := CheckScoredFields(s); err != nil {
		return TradeScored{}, err
	}
	if err := json.Unmarshal(payload, &s); err != nil {
		return TradeScored{}, decodeError("trade.scored payload", err)
	}
	return s, nil
}
