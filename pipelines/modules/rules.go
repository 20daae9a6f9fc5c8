package modules

import (
	"errors"
	"fmt"
	"regexp"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/sluicehq/sluice/stages"
)

// Rule ids (fixed), the value of the dlq.rule header.
const (
	// RuleTicker (sanity_fail): the ticker is missing or, upper-cased, does
	// not match ^[A-Z][A-Z0-9.-]{0,9}$.
	RuleTicker = "modules.ticker"
	// RuleModule (sanity_fail): the module is missing or does not match
	// ^[a-z][a-z0-9_]{0,39}$.
	RuleModule = "modules.module"
	// RuleUnknownModule (sanity_fail): the module is not in the catalog or
	// is disabled.
	RuleUnknownModule = "modules.unknown_module"
	// RuleRequest (sanity_fail): force is not a boolean or job_id is not a
	// UUID.
	RuleRequest = "modules.request"
	// RuleKey (sanity_fail): the record key is not the request's
	// TICKER:module, even ignoring letter case (a key that differs only in
	// case is re-keyed instead).
	RuleKey = "modules.key"
	// RuleUpstreamRejected (sanity_fail): the upstream answered a 4xx other
	// than 401, 403 and 429; the state turns error.
	RuleUpstreamRejected = "modules.upstream_rejected"
	// RuleSnapshotTooLarge (sanity_fail): the upstream payload exceeds
	// MaxPayloadBytes.
	RuleSnapshotTooLarge = "modules.snapshot_too_large"
	// RuleUpstream (retries_exhausted): timeouts, 5xx and network errors
	// that outlasted the retries; the state turns error.
	RuleUpstream = "modules.upstream"
	// RuleAnalyzerPrefix + module (exception): the module's analyzer
	// failed; the data stays ready and the state's analysis.error is set.
	RuleAnalyzerPrefix = "modules.analyzer."
)

// MaxPayloadBytes is the largest upstream payload stored (4 MiB).
const MaxPayloadBytes = 4 << 20

var (
	tickerPattern = regexp.MustCompile(`^[A-Z][A-Z0-9.-]{0,9}$`)
	modulePattern = regexp.MustCompile(`^[a-z][a-z0-9_]{0,39}$`)
)

// sanity returns the sanity_fail dead letter of a failed rule.
func sanity(rule string, format string, args ...any) error {
	return stages.DeadLetter(stages.ReasonSanityFail, rule, fmt.Errorf(format, args...))
}

// CheckTicker applies modules.ticker and returns the normalised
// (upper-cased) ticker.
func CheckTicker(ticker string) (string, error) {
	if ticker == "" {
		return "", sanity(RuleTicker, "ticker is missing")
	}
	t := NormalizeTicker(ticker)
	if !tickerPattern.MatchString(t) {
		return "", sanity(RuleTicker, "ticker %q does not match %s once upper-cased", clip(ticker), tickerPattern)
	}
	return t, nil
}

// CheckModule applies modules.module (module ids are lower case; they are
// not folded).
func CheckModule(module string) error {
	if module == "" {
		return sanity(RuleModule, "module is missing")
	}
	if !modulePattern.MatchString(module) {
		return sanity(RuleModule, "module %q does not match %s", clip(module), modulePattern)
	}
	return nil
}

// CheckKnownModule applies modules.unknown_module against cat and returns
// the module's catalog entry.
func CheckKnownModule(module string, cat Catalog) (Module, error) {
	m, ok := cat[module]
	switch {
	case !ok:
		return Module{}, sanity(RuleUnknownModule, "module %q is not in the catalog", clip(module))
	case !m.Enabled:
		return Module{}, sanity(RuleUnknownModule, "module %q is disabled", clip(module))
	}
	return m, nil
}

// CheckJobID applies the job_id part of modules.request: empty (no job),
// or a UUID in its hyphenated 36-character form, either case. It returns
// the id in lower case.
func CheckJobID(jobID string) (string, error) {
	if jobID == "" {
		return "", nil
	}
	id, err := uuid.Parse(jobID)
	if err != nil || len(jobID) != 36 {
		return "", sanity(RuleRequest, "job_id %q is not a UUID", clip(jobID))
	}
	return id.String(), nil
}

// CheckKey applies modules.key to a record key and the key of its
// (normalised) request, want: equal passes; equal but for ASCII letter
// case passes with rekey set (the request is produced again under want
// and this record only committed); anything else fails.
func CheckKey(key, want string) (rekey bool, err error) {
	switch {
	case key == want:
		return false, nil
	case equalFoldASCII(key, want):
		return true, nil
	}
	return false, sanity(RuleKey, "record key %q is not %q", clip(key), want)
}

// CheckPayloadSize applies modules.snapshot_too_large.
func CheckPayloadSize(n int) error {
	if n > MaxPayloadBytes {
		return sanity(RuleSnapshotTooLarge, "upstream payload of %d bytes exceeds %d", n, MaxPayloadBytes)
	}
	return nil
}

// UpstreamRejected is the dead letter of an upstream refusal (a 4xx other
// than 401, 403 and 429): modules.upstream_rejected.
func UpstreamRejected(err error) error {
	return stages.DeadLetter(stages.ReasonSanityFail, RuleUpstreamRejected, err)
}

// UpstreamFailed is the retryable error of a transient upstream failure: it
// carries modules.upstream, so a record whose retries run out is
// dead-lettered as retries_exhausted with that rule.
func UpstreamFailed(err error) error {
	if err == nil {
		err = errors.New("upstream failed")
	}
	return &stages.Error{Kind: stages.KindRetry, Rule: RuleUpstream, Err: err}
}

// AnalyzerFailed is the dead letter of a failed analysis of module:
// reason exception, rule modules.analyzer.<module>.
func AnalyzerFailed(module string, err error) error {
	return stages.DeadLetter(stages.ReasonException, RuleAnalyzerPrefix+module, err)
}

// clip shortens s for an error message.
func clip(s string) string { return clipTo(s, 64) }

// clipTo shortens s to at most max bytes, at a rune boundary, marking the
// cut with '…'.
func clipTo(s string, max int) string {
	if len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
