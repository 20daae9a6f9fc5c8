package trades

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/sluicehq/sluice/stages"
)

var synSince = time.Date(2025, 5, 1, 0, 0, 0, 0, time.UTC)

// fetchAll follows Next from the first page, retrying a page on errors up
// to 5 times; it returns the pages and the errors seen.
func fetchAll(t *testing.T, a BrokerAdapter, req FetchRequest) ([]Page, []error) {
	t.Helper()
	var pages []Page
	var errs []error
	for tries := 0; tries < 100; tries++ {
		p, err := a.FetchTrades(context.Background(), req)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		pages = append(pages, p)
		if p.Next == "" {
			return pages, errs
		}
		req.Cursor = p.Next
	}
	t.Fatal("no last page")
	return nil, nil
}

func TestSyntheticDefaultImport(t *testing.T) {
	req := FetchRequest{UserID: "u1", Since: synSince, ImportID: "imp"}
	pages, errs := fetchAll(t, NewSynthetic(), req)
	if len(errs) != 0 || len(pages) != 5 {
		t.Fatalf("%d pages, errors %v; want 5 and none", len(pages), errs)
	}
	now := synSince.Add(30 * 24 * time.Hour)
	seen := map[string]bool{}
	var trades []Trade
	for i, p := range pages {
		if len(p.Trades) != 100 || p.Percent != nil || p.RateLimit != nil {
			t.Errorf("page %d: %d trades, percent %v, rate limit %v", i+1, len(p.Trades), p.Percent, p.RateLimit)
		}
		if want := fmt.Sprint(i + 2); i < 4 && p.Next != want {
			t.Errorf("page %d: next %q, want %q", i+1, p.Next, want)
		}
		for _, r := range p.Trades {
			tr, err := r.Normalize("u1", BrokerSynthetic, now)
			if err != nil {
				t.Fatalf("synthetic trade %s fails a rule: %v", r.ID, err)
			}
			if seen[tr.ExtID] {
				t.Fatalf("ext id %s twice", tr.ExtID)
			}
			seen[tr.ExtID] = true
			trades = append(trades, tr)
		}
	}
	if !seen["syn-00000"] || !seen["syn-00499"] {
		t.Error("ext ids are not syn-00000 … syn-00499")
	}
	// Both number forms and absent fees occur.
	var absentFee, numericPrice int
	for _, p := range pages {
		for _, r := range p.Trades {
			if r.Fee == nil {
				absentFee++
			}
			if r.Price[0] != '"' {
				numericPrice++
			}
		}
	}
	if absentFee == 0 || absentFee == 500 || numericPrice != 500 {
		t.Errorf("%d trades without fee, %d numeric prices", absentFee, numericPrice)
	}
	// Bursts make the labels appear.
	labels := map[string]int{}
	for _, s := range Score(trades, synSince) {
		for _, l := range s.Labels {
			labels[l.Name]++
		}
	}
	if labels[LabelOvertrading] == 0 {
		t.Errorf("no overtrading in the synthetic history: %v", labels)
	}
}

func TestSyntheticIsDeterministic(t *testing.T) {
	req := FetchRequest{UserID: "u1", Since: synSince, ImportID: "a", Options: &SyntheticOptions{Trades: 250}}
	a, _ := fetchAll(t, NewSynthetic(), req)
	req.ImportID = "b" // another import of the same (user, since)
	b, _ := fetchAll(t, NewSynthetic(), req)
	if !reflect.DeepEqual(a, b) {
		t.Error("the same (user, since) gave other trades")
	}
	if len(a) != 3 || len(a[2].Trades) != 50 || a[2].Next != "" {
		t.Errorf("250 trades in %d pages, last of %d", len(a), len(a[len(a)-1].Trades))
	}
	req.UserID = "u2"
	c, _ := fetchAll(t, NewSynthetic(), req)
	ja, _ := json.Marshal(a[0].Trades)
	jc, _ := json.Marshal(c[0].Trades)
	if string(ja) == string(jc) {
		t.Error("two users got the same trades")
	}
}

func TestSyntheticFaults(t *testing.T) {
	s := NewSynthetic()
	opts := &SyntheticOptions{Trades: 400, FailPage: 2, FailTimes: 2, HTTP429Page: 3, RetryAfterMS: 1500, ExhaustPage: 4, ResetMS: 700}
	req := FetchRequest{UserID: "u1", Since: synSince, ImportID: "imp", Options: opts}
	pages, errs := fetchAll(t, s, req)
	if len(pages) != 4 {
		t.Fatalf("%d pages", len(pages))
	}
	want := []*BrokerError{{Status: 503}, {Status: 503}, {Status: 429, RetryAfter: 1500 * time.Millisecond}}
	if len(errs) != len(want) {
		t.Fatalf("errors %v, want %v", errs, want)
	}
	for i, err := range errs {
		var be *BrokerError
		if !errors.As(err, &be) || *be != *want[i] {
			t.Errorf("error %d = %v, want %v", i, err, want[i])
		}
	}
	for i, p := range pages {
		wantRL := i == 3
		if (p.RateLimit != nil) != wantRL || (wantRL && *p.RateLimit != (RateLimit{Remaining: 0, Reset: 700 * time.Millisecond})) {
			t.Errorf("page %d rate limit %v", i+1, p.RateLimit)
		}
	}
	// Counted per import: another import meets the faults again; the
	// first one, served, does not.
	req.Cursor = "2"
	if _, err := s.FetchTrades(context.Background(), req); err != nil {
		t.Errorf("import imp, page 2 again: %v", err)
	}
	req.ImportID = "other"
	if _, err := s.FetchTrades(context.Background(), req); err == nil {
		t.Error("import other, page 2: served at once")
	}
}

func TestSyntheticLatencyHonoursContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := NewSynthetic().FetchTrades(ctx, FetchRequest{UserID: "u1", Since: synSince, Options: &SyntheticOptions{PageLatencyMS: 3_600_000}})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("error %v, want context.Canceled", err)
	}
	_, err = NewSynthetic().FetchTrades(context.Background(), FetchRequest{UserID: "u1", Cursor: "zero"})
	var be *BrokerError
	if !errors.As(err, &be) || be.Status != 400 {
		t.Errorf("bad cursor: %v", err)
	}
}

func TestClassifyFetchError(t *testing.T) {
	const reset, safety = 2 * time.Second, 250 * time.Millisecond
	cases := []struct {
		name   string
		err    error
		kind   stages.Kind
		reason stages.Reason
		rule   string
		after  time.Duration
	}{
		{"401", &BrokerError{Status: 401}, stages.KindDeadLetter, stages.ReasonSanityFail, RuleBrokerAuth, 0},
		{"403", fmt.Errorf("page 3: %w", &BrokerError{Status: 403}), stages.KindDeadLetter, stages.ReasonSanityFail, RuleBrokerAuth, 0},
		{"429 with Retry-After", &BrokerError{Status: 429, RetryAfter: time.Second}, stages.KindWait, "", "", time.Second + safety},
		{"429 without", &BrokerError{Status: 429}, stages.KindWait, "", "", reset + safety},
		{"503", &BrokerError{Status: 503}, stages.KindRetry, "", RuleBrokerFetch, 0},
		{"network", errors.New("connection reset"), stages.KindRetry, "", RuleBrokerFetch, 0},
		{"deadline", context.DeadlineExceeded, stages.KindRetry, "", RuleBrokerFetch, 0},
	}
	for _, c := range cases {
		e := stages.Classify(ClassifyFetchError(c.err, reset, safety))
		if e.Kind != c.kind || e.Reason != c.reason || e.Rule != c.rule || e.After != c.after || !errors.Is(e, c.err) {
			t.Errorf("%s: %+v", c.name, e)
		}
	}
	if err := ClassifyFetchError(context.Canceled, reset, safety); err != context.Canceled {
		t.Errorf("cancelled: %v", err)
	}
}

func TestEstimatePercent(t *testing.T) {
	for _, c := range []struct {
		page int
		last bool
		want int
	}{{1, false, 50}, {2, false, 67}, {3, false, 75}, {4, false, 80}, {99, false, 99}, {199, false, 100}, {1, true, 100}, {5, true, 100}} {
		if got := EstimatePercent(c.page, c.last); got != c.want {
			t.Errorf("EstimatePercent(%d, %t) = %d, want %d", c.page, c.last, got, c.want)
		}
	}
}
