package modules

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/sluicehq/sluice/stages/run"
)

// Status is a ticker × module's stored status. Staleness and expiry are
// derived from the times and the catalog (see Freshness), never stored.
type Status string

// The statuses.
const (
	StatusMissing    Status = "missing"
	StatusRefreshing Status = "refreshing"
	StatusReady      Status = "ready"
	StatusError      Status = "error"
)

func (s Status) valid() bool {
	switch s {
	case StatusMissing, StatusRefreshing, StatusReady, StatusError:
		return true
	}
	return false
}

// maxErrorBytes bounds an error text stored in a state record.
const maxErrorBytes = 1024

// LeaseDuration is how long a refresh lease lasts (the seed's lock): each
// attempt of a refresh renews it.
const LeaseDuration = 120 * time.Second

// State is a modules.state record, keyed Key(Ticker, Module); the topic is
// compacted, so the greatest (Epoch, Version) of a key is its state.
//
// FetchedAt, ExpiresAt, DataDate (YYYY-MM-DD, empty for intraday data) and
// InputHash describe the last good data, kept when a refresh fails.
// Analysis is the analysis of that data, if any. Lease is set while a
// refresh runs. Epoch is the consumer-group generation at which the
// writing owner got the key's partition, Version grows by one per write:
// (Epoch, Version) is the fencing token that the restore and the mirror
// compare (see Supersedes). It is the run.Token the runtime's state store
// stamps on the record (Partition.NextToken when the value is built).
type State struct {
	Ticker     string
	Module     string
	Status     Status
	FetchedAt  *time.Time
	ExpiresAt  *time.Time
	DataDate   string
	InputHash  string
	Analysis   *Analysis
	LastError  string
	ErrorCount int
	Lease      *Lease
	Epoch      int32
	Version    int64
	UpdatedAt  time.Time
}

// Analysis is the analysis of a state's data: the input hash it was
// computed from, its version among the analyses of (ticker, module,
// data_date), when it was made and until when it may be reused, and the
// analyzer's error when it failed (the data stays ready).
type Analysis struct {
	InputHash       string     `json:"input_hash"`
	AnalysisVersion int        `json:"analysis_version"`
	AnalyzedAt      *time.Time `json:"analyzed_at"`
	ExpiresAt       *time.Time `json:"expires_at"`
	Error           string     `json:"error,omitempty"`
}

// Lease is the owner of a running refresh and when its lease ends.
type Lease struct {
	Owner string    `json:"owner"`
	Until time.Time `json:"until"`
}

// Key returns the state's record key.
func (s State) Key() string { return Key(s.Ticker, s.Module) }

// Token returns the state's fencing token.
func (s State) Token() run.Token { return run.Token{Epoch: s.Epoch, Version: s.Version} }

// Supersedes reports whether s replaces prev: its (Epoch, Version) is
// greater. A state written by a revoked owner after the new owner's first
// write has a smaller epoch and supersedes nothing.
func (s State) Supersedes(prev State) bool { return prev.Token().Less(s.Token()) }

// next returns s as written with token tok at now.
func (s State) next(tok run.Token, now time.Time) State {
	s.Epoch, s.Version, s.UpdatedAt = tok.Epoch, tok.Version, now.UTC()
	return s
}

// Refreshing returns the state of a refresh starting (or its next attempt)
// at now by owner (the group member id), written with token tok (the
// store partition's NextToken): status refreshing with a lease of
// LeaseDuration. The last good data is kept.
func (s State) Refreshing(owner string, tok run.Token, now time.Time) State {
	n := s.next(tok, now)
	n.Status = StatusRefreshing
	n.Lease = &Lease{Owner: owner, Until: now.UTC().Add(LeaseDuration)}
	return n
}

// Ready returns the state after a successful fetch at now: data of
// inputHash and dataDate, expiring DataTTL after now, analysis a; the
// lease and the last error are cleared.
func (s State) Ready(m Module, inputHash, dataDate string, a *Analysis, tok run.Token, now time.Time) State {
	n := s.next(tok, now)
	fetched := now.UTC()
	expires := fetched.Add(m.DataTTL)
	n.Status, n.FetchedAt, n.ExpiresAt = StatusReady, &fetched, &expires
	n.InputHash, n.DataDate, n.Analysis = inputHash, dataDate, a
	n.Lease, n.LastError, n.ErrorCount = nil, "", 0
	return n
}

// Failed returns the state after a failed refresh: status error, the
// error recorded and counted, the lease cleared; the last good data and
// its analysis are kept, so that it can still be served while not too old.
func (s State) Failed(cause error, tok run.Token, now time.Time) State {
	n := s.next(tok, now)
	n.Status, n.Lease, n.ErrorCount = StatusError, nil, s.ErrorCount+1
	n.LastError = "refresh failed"
	if cause != nil {
		n.LastError = clipTo(cause.Error(), maxErrorBytes)
	}
	return n
}

// stateWire is the JSON form of a State: every field is present, null
// when unset.
type stateWire struct {
	Ticker     string     `json:"ticker"`
	Module     string     `json:"module"`
	Status     Status     `json:"status"`
	FetchedAt  *time.Time `json:"fetched_at"`
	ExpiresAt  *time.Time `json:"expires_at"`
	DataDate   *string    `json:"data_date"`
	InputHash  *string    `json:"input_hash"`
	Analysis   *Analysis  `json:"analysis"`
	LastError  *string    `json:"last_error"`
	ErrorCount int        `json:"error_count"`
	Lease      *Lease     `json:"lease"`
	Epoch      int32      `json:"epoch"`
	Version    int64      `json:"version"`
	UpdatedAt  time.Time  `json:"updated_at"`
}

func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// MarshalJSON writes the record format of modules.state.
func (s State) MarshalJSON() ([]byte, error) {
	return json.Marshal(stateWire{
		Ticker: s.Ticker, Module: s.Module, Status: s.Status, FetchedAt: s.FetchedAt, ExpiresAt: s.ExpiresAt,
		DataDate: nullable(s.DataDate), InputHash: nullable(s.InputHash), Analysis: s.Analysis,
		LastError: nullable(s.LastError), ErrorCount: s.ErrorCount, Lease: s.Lease,
		Epoch: s.Epoch, Version: s.Version, UpdatedAt: s.UpdatedAt,
	})
}

// UnmarshalJSON reads the record format of modules.state.
func (s *State) UnmarshalJSON(b []byte) error {
	var w stateWire
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*s = State{
		Ticker: w.Ticker, Module: w.Module, Status: w.Status, FetchedAt: w.FetchedAt, ExpiresAt: w.ExpiresAt,
		DataDate: deref(w.DataDate), InputHash: deref(w.InputHash), Analysis: w.Analysis,
		LastError: deref(w.LastError), ErrorCount: w.ErrorCount, Lease: w.Lease,
		Epoch: w.Epoch, Version: w.Version, UpdatedAt: w.UpdatedAt,
	}
	return nil
}

// DecodeState is the decoder of modules.state (a stages.Decoder). A value
// that is not a JSON object, lacks the ticker or module, has an unknown
// status, a data_date that is not YYYY-MM-DD, a negative epoch or version,
// or is filed under another key is a
// decode_error. A tombstone (nil value) is not a state: callers handle
// deletions before decoding.
func DecodeState(key, value []byte) (State, error) {
	if !utf8.Valid(value) {
		return State{}, decodeError("state", errors.New("value is not UTF-8"))
	}
	var s State
	if err := decodeObject(value, &s); err != nil {
		return State{}, decodeError("state", err)
	}
	switch {
	case s.Ticker == "" || s.Module == "":
		return State{}, decodeError("state", errors.New("ticker or module is missing"))
	case !s.Status.valid():
		return State{}, decodeError("state", fmt.Errorf("unknown status %q", clip(string(s.Status))))
	case s.DataDate != "" && !isDate(s.DataDate):
		return State{}, decodeError("state", fmt.Errorf("data_date %q is not YYYY-MM-DD", clip(s.DataDate)))
	case s.Epoch < 0 || s.Version < 0:
		return State{}, decodeError("state", fmt.Errorf("negative fencing token (%d, %d)", s.Epoch, s.Version))
	case key != nil && string(key) != s.Key():
		return State{}, decodeError("state", fmt.Errorf("record key %q is not %q", clip(string(key)), s.Key()))
	}
	return s, nil
}

func isDate(s string) bool {
	_, err := time.Parse(time.DateOnly, s)
	return err == nil
}

// StateStoreConfig declares the refresh service's state store over the
// changelog topic (modules.state, after the run's naming): JSON values as
// DecodeState reads them, and a restore that keeps per key the state with
// the greatest fencing token, not the last record (a revoked owner's late
// record is ignored): see FoldState.
func StateStoreConfig(topic string) run.StoreConfig[State] {
	return run.StoreConfig[State]{
		Name:   "modules-state",
		Topic:  topic,
		Encode: func(s State) ([]byte, error) { return json.Marshal(s) },
		Decode: func(b []byte) (State, error) { return DecodeState(nil, b) },
		Fold:   FoldState,
	}
}

// FoldState is the restore's fold of modules.state: next replaces cur
// unless its token is smaller. Records the runtime wrote carry their token
// in headers (run.KeepGreatest decides); a record without them (written by
// hand or by another producer) is judged by the (epoch, version) of the
// state it holds, which the refresh service always sets to the record's
// token. A tombstone on either side is decided by run.KeepGreatest.
func FoldState(cur, next run.Entry[State]) bool {
	if (cur.Tokened && next.Tokened) || cur.Deleted || next.Deleted {
		return run.KeepGreatest(cur, next)
	}
	return !next.Value.Token().Less(cur.Value.Token())
}
