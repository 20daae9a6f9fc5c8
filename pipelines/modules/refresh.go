package modules

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/sluicehq/sluice/stages"
)

// RefreshRequest is a modules.refresh record, keyed Key(Ticker, Module):
// a request to bring one ticker × module up to date. Force skips the
// freshness and cooldown gate. Reason says who asked (api, cli, assemble,
// …); JobID, when set, is the analysis job the refresh serves. RequestID
// identifies the request for tracing (not for deduplication: the gate
// makes repeated requests cheap).
type RefreshRequest struct {
	Ticker      string    `json:"ticker"`
	Module      string    `json:"module"`
	Force       bool      `json:"force"`
	Reason      string    `json:"reason"`
	JobID       string    `json:"job_id,omitempty"`
	RequestedAt time.Time `json:"requested_at"`
	RequestID   string    `json:"request_id"`
}

// Key returns the request's record key.
func (r RefreshRequest) Key() string { return Key(r.Ticker, r.Module) }

// RefreshRecord is a modules.refresh value as decoded, before the rules:
// the fields the rules check are kept as raw JSON (nil when absent), so
// that a field of the wrong type fails its rule rather than the decoding.
type RefreshRecord struct {
	Ticker, Module, Force, JobID json.RawMessage
	Reason                       string
	RequestedAt                  time.Time // zero when absent
	RequestID                    string
}

// DecodeRefresh is the decoder of modules.refresh (a stages.Decoder): a
// value that is not UTF-8 or not a JSON object, or whose reason,
// request_id or requested_at (RFC 3339) has the wrong type, is a
// decode_error. The other fields are checked by Validate.
func DecodeRefresh(_, value []byte) (RefreshRecord, error) {
	if !utf8.Valid(value) {
		return RefreshRecord{}, decodeError("refresh", errors.New("value is not UTF-8"))
	}
	var w struct {
		Ticker, Module, Force json.RawMessage
		JobID                 json.RawMessage `json:"job_id"`
		Reason                *string
		RequestedAt           *time.Time `json:"requested_at"`
		RequestID             *string    `json:"request_id"`
	}
	if err := decodeObject(value, &w); err != nil {
		return RefreshRecord{}, decodeError("refresh", err)
	}
	r := RefreshRecord{Ticker: w.Ticker, Module: w.Module, Force: w.Force, JobID: w.JobID}
	if w.Reason != nil {
		r.Reason = *w.Reason
	}
	if w.RequestID != nil {
		r.RequestID = *w.RequestID
	}
	if w.RequestedAt != nil {
		r.RequestedAt = w.RequestedAt.UTC()
	}
	return r, nil
}

// Validated is a refresh record that passed the rules: the normalised
// request (upper-cased ticker, lower-case job id), its module's catalog
// entry, and whether the record must be re-keyed (its key differs from
// Request.Key() only in letter case).
type Validated struct {
	Request RefreshRequest
	Module  Module
	Rekey   bool
}

// Validate applies the rules, in order: modules.ticker, modules.module,
// modules.request (force a boolean, job_id a UUID; both optional),
// modules.unknown_module (against cat), then modules.key against the
// record key. The first failure is returned.
func (r RefreshRecord) Validate(key string, cat Catalog) (Validated, error) {
	tickerStr, ok := jsonString(r.Ticker)
	if !ok {
		return Validated{}, sanity(RuleTicker, "ticker is missing or not a string")
	}
	ticker, err := CheckTicker(tickerStr)
	if err != nil {
		return Validated{}, err
	}
	module, ok := jsonString(r.Module)
	if !ok {
		return Validated{}, sanity(RuleModule, "module is missing or not a string")
	}
	if err := CheckModule(module); err != nil {
		return Validated{}, err
	}
	force := false
	if !isNull(r.Force) {
		if err := json.Unmarshal(r.Force, &force); err != nil {
			return Validated{}, sanity(RuleRequest, "force %s is not a boolean", clip(string(r.Force)))
		}
	}
	jobID := ""
	if !isNull(r.JobID) {
		s, ok := jsonString(r.JobID)
		if !ok {
			return Validated{}, sanity(RuleRequest, "job_id %s is not a UUID", clip(string(r.JobID)))
		}
		if jobID, err = CheckJobID(s); err != nil {
			return Validated{}, err
		}
	}
	m, err := CheckKnownModule(module, cat)
	if err != nil {
		return Validated{}, err
	}
	req := RefreshRequest{Ticker: ticker, Module: module, Force: force, Reason: r.Reason, JobID: jobID,
		RequestedAt: r.RequestedAt, RequestID: r.RequestID}
	rekey, err := CheckKey(key, req.Key())
	if err != nil {
		return Validated{}, err
	}
	return Validated{Request: req, Module: m, Rekey: rekey}, nil
}

// decodeObject unmarshals value, which must hold a JSON object, into v.
func decodeObject(value []byte, v any) error {
	trimmed := bytes.TrimLeft(value, " \t\r\n")
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return errors.New("value is not a JSON object")
	}
	return json.Unmarshal(value, v)
}

func decodeError(what string, err error) error {
	return stages.DeadLetter(stages.ReasonDecodeError, "", fmt.Errorf("modules %s: %w", what, err))
}

// jsonString returns the string raw holds; ok is false when raw is absent,
// null or not a string.
func jsonString(raw json.RawMessage) (string, bool) {
	if len(raw) == 0 || raw[0] != '"' {
		return "", false
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", false
	}
	return s, true
}

func isNull(raw json.RawMessage) bool {
	return len(raw) == 0 || string(raw) == "null"
}
