package modules

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/sluicehq/sluice/stages"
)

func TestClassifyUpstreamError(t *testing.T) {
	t.Parallel()
	if ClassifyUpstreamError(nil) != nil {
		t.Error("nil classified")
	}
	cancelled := fmt.Errorf("fetch: %w", context.Canceled)
	if got := ClassifyUpstreamError(cancelled); got != cancelled {
		t.Errorf("cancelled = %v", got)
	}
	for _, tc := range []struct {
		err    error
		kind   stages.Kind
		reason stages.Reason
		rule   string
		after  time.Duration
		result string
	}{
		{&UpstreamError{Status: 401}, stages.KindFatal, "", "", 0, "rejected"},
		{&UpstreamError{Status: 403}, stages.KindFatal, "", "", 0, "rejected"},
		{&UpstreamError{Status: 429, RetryAfter: 7 * time.Second}, stages.KindWait, "", "", 7 * time.Second, "rate_limited"},
		{&UpstreamError{Status: 429}, stages.KindWait, "", "", DefaultRateLimitWait, "rate_limited"},
		{&UpstreamError{Status: 400}, stages.KindDeadLetter, stages.ReasonSanityFail, RuleUpstreamRejected, 0, "rejected"},
		{&UpstreamError{Status: 404}, stages.KindDeadLetter, stages.ReasonSanityFail, RuleUpstreamRejected, 0, "rejected"},
		{&UpstreamError{Status: 499}, stages.KindDeadLetter, stages.ReasonSanityFail, RuleUpstreamRejected, 0, "rejected"},
		{fmt.Errorf("uw: %w", ErrUnsupportedModule), stages.KindDeadLetter, stages.ReasonSanityFail, RuleUpstreamRejected, 0, "rejected"},
		{fmt.Errorf("uw: %w", ErrInvalidPayload), stages.KindDeadLetter, stages.ReasonSanityFail, RuleUpstreamRejected, 0, "rejected"},
		{fmt.Errorf("uw: %w", ErrPayloadTooLarge), stages.KindDeadLetter, stages.ReasonSanityFail, RuleSnapshotTooLarge, 0, "rejected"},
		{&UpstreamError{Status: 500}, stages.KindRetry, "", RuleUpstream, 0, "transient"},
		{&UpstreamError{Status: 503}, stages.KindRetry, "", RuleUpstream, 0, "transient"},
		{&UpstreamError{Status: 302}, stages.KindRetry, "", RuleUpstream, 0, "transient"},
		{fmt.Errorf("call: %w", context.DeadlineExceeded), stages.KindRetry, "", RuleUpstream, 0, "transient"},
		{&net.OpError{Op: "dial", Err: errors.New("connection refused")}, stages.KindRetry, "", RuleUpstream, 0, "transient"},
	} {
		c := stages.Classify(ClassifyUpstreamError(tc.err))
		if c.Kind != tc.kind || c.Reason != tc.reason || c.Rule != tc.rule || c.After != tc.after || !errors.Is(c, tc.err) {
			t.Errorf("%v: %+v", tc.err, c)
		}
		if got := UpstreamResult(tc.err); got != tc.result {
			t.Errorf("%v: result %s, want %s", tc.err, got, tc.result)
		}
	}
	if UpstreamResult(nil) != "ok" {
		t.Error("nil result")
	}
}
