package trades

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/sluicehq/sluice/stages"
)

// Command kinds on trades.import (key user_id).
const (
	KindImport = "import" // fetch a user's trades from a broker
	KindPush   = "push"   // store trades given in the command (one page, no fetch)
	KindPage   = "page"   // internal: the next page of a running import
)

// Command is one decoded trades.import record: exactly one of Import, Push
// and Page is set, the one Kind names.
type Command struct {
	Kind   string
	Import *ImportCommand
	Push   *PushCommand
	Page   *PageCommand
}

// ImportCommand asks for the user's trades at Broker since Since:
// {"kind":"import","user_id","since","broker","force":false,"options":{…}}.
// Since is kept as the command carries it (a date YYYY-MM-DD or RFC 3339):
// it is hashed into the import id. Options apply to the synthetic broker
// only.
type ImportCommand struct {
	UserID  string
	Since   string
	Broker  string
	Force   bool
	Options *SyntheticOptions
}

// SyntheticOptions shape the synthetic broker's trades and faults; zero
// fields take the defaults of NewSynthetic.
type SyntheticOptions struct {
	Trades        int `json:"trades,omitempty"`          // trades in all (default 500)
	PageSize      int `json:"page_size,omitempty"`       // trades a page (default 100)
	PageLatencyMS int `json:"page_latency_ms,omitempty"` // delay of every fetch
	FailPage      int `json:"fail_page,omitempty"`       // page answering 503 …
	FailTimes     int `json:"fail_times,omitempty"`      // … this many times (default 1)
	HTTP429Page   int `json:"http429_page,omitempty"`    // page answering 429 once …
	RetryAfterMS  int `json:"retry_after_ms,omitempty"`  // … with this Retry-After
	ExhaustPage   int `json:"exhaust_page,omitempty"`    // page reporting remaining = 0 …
	ResetMS       int `json:"reset_ms,omitempty"`        // … with this reset
}

// PushCommand stores the trades it carries as one page:
// {"kind":"push","user_id","broker","push_id","trades":[…]}. Trades keeps
// its JSON text: rule trades.push (Validate) checks that it is an array of
// at most MaxPushTrades elements, and each element is a RawTrade.
type PushCommand struct {
	UserID string
	Broker string
	PushID string
	Trades json.RawMessage
}

// PageCommand is the internal record that runs page Page of the import run
// RunID (the trades-import service chains it): {"kind":"page","user_id",
// "import_id","run_id","page","cursor","not_before"}. Cursor is the broker's
// cursor for the page (empty for the first); a page is not fetched before
// NotBefore (a rate limit's reset).
type PageCommand struct {
	UserID    string     `json:"user_id"`
	ImportID  string     `json:"import_id"`
	RunID     string     `json:"run_id"`
	Page      int        `json:"page"`
	Cursor    string     `json:"cursor,omitempty"`
	NotBefore *time.Time `json:"not_before,omitempty"`
}

// ImportID is the import id of the command (ImportID).
func (c ImportCommand) ImportID() string { return ImportID(c.UserID, c.Since, c.Broker) }

// ImportID is the import id of the push (PushImportID).
func (c PushCommand) ImportID() string { return PushImportID(c.UserID, c.PushID) }

// MarshalJSON writes the flat command with its kind.
func (c ImportCommand) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Kind    string            `json:"kind"`
		UserID  string            `json:"user_id"`
		Since   string            `json:"since"`
		Broker  string            `json:"broker"`
		Force   bool              `json:"force"`
		Options *SyntheticOptions `json:"options,omitempty"`
	}{KindImport, c.UserID, c.Since, c.Broker, c.Force, c.Options})
}

// MarshalJSON writes the flat command with its kind.
func (c PushCommand) MarshalJSON() ([]byte, error) {
	trades := c.Trades
	if trades == nil {
		trades = json.RawMessage("[]")
	}
	return json.Marshal(struct {
		Kind   string          `json:"kind"`
		UserID string          `json:"user_id"`
		Broker string          `json:"broker"`
		PushID string          `json:"push_id"`
		Trades json.RawMessage `json:"trades"`
	}{KindPush, c.UserID, c.Broker, c.PushID, trades})
}

// MarshalJSON writes the flat command with its kind.
func (c PageCommand) MarshalJSON() ([]byte, error) {
	type page PageCommand
	return json.Marshal(struct {
		Kind string `json:"kind"`
		page
	}{KindPage, page(c)})
}

var _ stages.Decoder[Command] = DecodeCommand

// DecodeCommand is the decoder of trades.import (a stages.Decoder): a value
// that is not UTF-8 or not a JSON object is a decode_error, a missing or
// unknown kind an unknown_task_type. Fields that rules check (user_id,
// since, broker, push_id, trades) are read leniently (a non-string is
// empty) so that the rule reports them; other fields of the wrong type are
// a decode_error. Rules are applied by the commands' Validate.
func DecodeCommand(_, value []byte) (Command, error) {
	fields, err := decodeObject(value)
	if err != nil {
		return Command{}, err
	}
	kind, ok := jsonString(fields["kind"])
	switch {
	case !ok || kind == "":
		return Command{}, stages.DeadLetter(stages.ReasonUnknownTaskType, "", errors.New("trades command: kind is missing"))
	case kind == KindImport:
		var w struct {
			Force   *bool             `json:"force"`
			Options *SyntheticOptions `json:"options"`
		}
		if err := json.Unmarshal(value, &w); err != nil {
			return Command{}, decodeError("import command", err)
		}
		c := &ImportCommand{Force: w.Force != nil && *w.Force, Options: w.Options}
		c.UserID, _ = jsonString(fields["user_id"])
		c.Since, _ = jsonString(fields["since"])
		c.Broker, _ = jsonString(fields["broker"])
		return Command{Kind: kind, Import: c}, nil
	case kind == KindPush:
		c := &PushCommand{Trades: fields["trades"]}
		c.UserID, _ = jsonString(fields["user_id"])
		c.Broker, _ = jsonString(fields["broker"])
		c.PushID, _ = jsonString(fields["push_id"])
		return Command{Kind: kind, Push: c}, nil
	case kind == KindPage:
		var c PageCommand
		if err := json.Unmarshal(value, &c); err != nil {
			return Command{}, decodeError("page command", err)
		}
		if c.ImportID == "" || c.RunID == "" || c.Page < 1 {
			return Command{}, decodeError("page command", errors.New("needs import_id, run_id and page >= 1"))
		}
		return Command{Kind: kind, Page: &c}, nil
	}
	return Command{}, stages.DeadLetter(stages.ReasonUnknownTaskType, "", fmt.Errorf("trades command: unknown kind %q", clip(kind)))
}

// decodeObject checks that value is UTF-8 JSON holding an object and
// returns its members.
func decodeObject(value []byte) (map[string]json.RawMessage, error) {
	if !utf8.Valid(value) {
		return nil, decodeError("record", errors.New("value is not UTF-8"))
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(value, &fields); err != nil {
		return nil, decodeError("record", err)
	}
	if fields == nil {
		return nil, decodeError("record", errors.New("value is not a JSON object"))
	}
	return fields, nil
}

func decodeError(what string, err error) error {
	return stages.DeadLetter(stages.ReasonDecodeError, "", fmt.Errorf("trades %s: %w", what, err))
}

// Validate applies the rules of an import command, in order: trades.user_id,
// trades.key (key is the record key), trades.since (now's UTC date
// decides "today"), trades.broker. The first failure is returned.
func (c ImportCommand) Validate(key string, now time.Time) error {
	if err := CheckUserID(c.UserID); err != nil {
		return err
	}
	if err := CheckKey(key, c.UserID); err != nil {
		return err
	}
	if _, err := CheckSince(c.Since, now); err != nil {
		return err
	}
	return CheckBroker(c.Broker)
}

// Validate applies the rules of a push, in order: trades.user_id,
// trades.key, trades.broker, trades.push (a push_id of 1 to MaxPushIDBytes
// bytes; trades an array of at most MaxPushTrades elements). It returns
// the elements of trades; each is checked by Normalize (RawTradeFrom).
func (c PushCommand) Validate(key string) ([]json.RawMessage, error) {
	if err := CheckUserID(c.UserID); err != nil {
		return nil, err
	}
	if err := CheckKey(key, c.UserID); err != nil {
		return nil, err
	}
	if err := CheckBroker(c.Broker); err != nil {
		return nil, err
	}
	switch {
	case c.PushID == "":
		return nil, sanity(RulePush, "push_id is missing")
	case len(c.PushID) > MaxPushIDBytes:
		return nil, sanity(RulePush, "push_id is %d bytes, more than %d", len(c.PushID), MaxPushIDBytes)
	}
	raw := bytes.TrimSpace(c.Trades)
	if len(raw) == 0 || raw[0] != '[' {
		return nil, sanity(RulePush, "trades is not an array")
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, sanity(RulePush, "trades is not an array: %v", err)
	}
	if len(items) > MaxPushTrades {
		return nil, sanity(RulePush, "push has %d trades, more than %d", len(items), MaxPushTrades)
	}
	return items, nil
}

// Validate applies trades.user_id and trades.key to a page command.
func (c PageCommand) Validate(key string) error {
	if err := CheckUserID(c.UserID); err != nil {
		return err
	}
	return CheckKey(key, c.UserID)
}

// RawTradeFrom reads one element of a push's trades. An element that is
// not a JSON object gives a RawTrade with every field absent, which fails
// trades.trade_id.
func RawTradeFrom(item json.RawMessage) RawTrade {
	var r RawTrade
	if err := json.Unmarshal(item, &r); err != nil {
		return RawTrade{}
	}
	return r
}
