package trades_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/pipelines/trades"
	"github.com/sluicehq/sluice/stages"
)

// fetchAll follows a broker's cursor to its last page.
func fetchAll(t *testing.T, a trades.BrokerAdapter, req trades.FetchRequest) ([]trades.Page, error) {
	t.Helper()
	var pages []trades.Page
	for range 20 {
		p, err := a.FetchTrades(context.Background(), req)
		if err != nil {
			return pages, err
		}
		pages = append(pages, p)
		if p.Next == "" {
			return pages, nil
		}
		req.Cursor = p.Next
	}
	t.Fatal("more than 20 pages")
	return nil, nil
}

// The coinbase adapter pages through fills with the answer's cursor, and
// every fill normalises.
func TestCoinbaseAdapterPages(t *testing.T) {
	t.Parallel()
	fake, srv := newFakeCoinbase(t, "tok-1", 25)
	cb := trades.NewCoinbase(srv.URL, srv.Client())
	cb.Limit = 10
	since := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	pages, err := fetchAll(t, cb, trades.FetchRequest{UserID: "u1", AccessToken: "tok-1", Since: since})
	if err != nil {
		t.Fatal(err)
	}
	var n []int
	seen := map[string]bool{}
	for _, p := range pages {
		n = append(n, len(p.Trades))
		for _, r := range p.Trades {
			tr, err := r.Normalize("u1", trades.BrokerCoinbase, time.Now())
			if err != nil {
				t.Fatalf("fill %s: %v", r.ID, err)
			}
			if seen[tr.ExtID] || tr.Symbol != "BTC-USD" || tr.Fee.String() != "0.42" {
				t.Fatalf("trade %+v", tr)
			}
			seen[tr.ExtID] = true
		}
		if p.Percent != nil || p.RateLimit != nil {
			t.Fatalf("page %+v: coinbase gives no percent or budget", p)
		}
	}
	if !equalInts(n, []int{10, 10, 5}) || len(seen) != 25 {
		t.Fatalf("pages of %v trades (%d distinct), want 10, 10, 5", n, len(seen))
	}
	if got := fake.requests[0]; got != "/api/v3/brokerage/orders/historical/fills?limit=10&start_sequence_timestamp=2025-01-01T00%3A00%3A00Z" {
		t.Fatalf("first request %s", got)
	}
}

// A 429 carries Retry-After (a wait that spends no attempt); a 401 is
// permanent (trades.broker_auth) and its error says nothing of the token
// or the body.
func TestCoinbaseAdapterErrors(t *testing.T) {
	t.Parallel()
	fake, srv := newFakeCoinbase(t, "tok-1", 5)
	fake.throttle = "first"
	cb := trades.NewCoinbase(srv.URL, srv.Client())
	req := trades.FetchRequest{UserID: "u1", AccessToken: "tok-1", Since: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)}
	_, err := cb.FetchTrades(context.Background(), req)
	var be *trades.BrokerError
	if !errors.As(err, &be) || be.Status != 429 || be.RetryAfter != 2*time.Second {
		t.Fatalf("throttled fetch: %v", err)
	}
	if c := stages.Classify(trades.ClassifyFetchError(err, 0, 250*time.Millisecond)); c.Kind != stages.KindWait || c.After != 2250*time.Millisecond {
		t.Fatalf("429 classified %+v, want a wait of 2.25s", c)
	}
	if p, err := cb.FetchTrades(context.Background(), req); err != nil || len(p.Trades) != 5 {
		t.Fatalf("after the 429: %d trades, %v", len(p.Trades), err)
	}
	req.AccessToken = "wrong-secret-token"
	_, err = cb.FetchTrades(context.Background(), req)
	if !errors.As(err, &be) || be.Status != 401 {
		t.Fatalf("bad token: %v", err)
	}
	if c := stages.Classify(trades.ClassifyFetchError(err, 0, 0)); c.Kind != stages.KindDeadLetter || c.Rule != trades.RuleBrokerAuth {
		t.Fatalf("401 classified %+v", c)
	}
	if msg := err.Error(); containsAny(msg, "wrong-secret-token", "invalid token") {
		t.Fatalf("error %q shows the token or the body", msg)
	}
}

// The binance adapter signs its requests, walks its symbols with fromId
// pages, and reports the rate-limit budget of X-MBX-USED-WEIGHT-1M.
func TestBinanceAdapterPages(t *testing.T) {
	t.Parallel()
	fake, srv := newFakeBinance(t, "key-1", "secret-1", map[string]int{"BTCUSDT": 15, "ETHUSDT": 3})
	fake.used = []int{20, 6000, 40}
	bn := trades.NewBinance(srv.URL, []string{"BTCUSDT", "ETHUSDT"}, srv.Client())
	bn.Limit = 10
	pages, err := fetchAll(t, bn, trades.FetchRequest{UserID: "u1", AccessToken: "key-1:secret-1", Since: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)})
	if err != nil {
		t.Fatal(err)
	}
	var n, remaining []int
	seen := map[string]bool{}
	for _, p := range pages {
		n = append(n, len(p.Trades))
		if p.RateLimit == nil || p.RateLimit.Reset <= 0 || p.RateLimit.Reset > time.Minute {
			t.Fatalf("page rate limit %+v", p.RateLimit)
		}
		remaining = append(remaining, p.RateLimit.Remaining)
		for _, r := range p.Trades {
			tr, err := r.Normalize("u1", trades.BrokerBinance, time.Now())
			if err != nil {
				t.Fatalf("trade %s: %v", r.ID, err)
			}
			seen[tr.ExtID] = true
		}
	}
	if !equalInts(n, []int{10, 5, 3}) || len(seen) != 18 || !seen["BTCUSDT:114"] || !seen["ETHUSDT:100"] {
		t.Fatalf("pages of %v trades, ids %v", n, seen)
	}
	if !equalInts(remaining, []int{5980, 0, 5960}) {
		t.Fatalf("remaining %v", remaining)
	}
}

// Binance's 429 carries Retry-After; a wrong key or secret is a 401.
func TestBinanceAdapterErrors(t *testing.T) {
	t.Parallel()
	fake, srv := newFakeBinance(t, "key-1", "secret-1", map[string]int{"BTCUSDT": 2})
	fake.throttle = true
	bn := trades.NewBinance(srv.URL, []string{"BTCUSDT"}, srv.Client())
	req := trades.FetchRequest{UserID: "u1", AccessToken: "key-1:secret-1", Since: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)}
	_, err := bn.FetchTrades(context.Background(), req)
	var be *trades.BrokerError
	if !errors.As(err, &be) || be.Status != 429 || be.RetryAfter != 3*time.Second {
		t.Fatalf("throttled: %v", err)
	}
	p, err := bn.FetchTrades(context.Background(), req)
	if err != nil || len(p.Trades) != 2 || p.Next != "" {
		t.Fatalf("after the 429: %+v, %v", p, err)
	}
	for _, tok := range []string{"key-1:wrong", "nokey", "other:secret-1"} {
		req.AccessToken = tok
		if _, err := bn.FetchTrades(context.Background(), req); !errors.As(err, &be) || be.Status != 401 {
			t.Fatalf("token %q: %v, want a 401", tok, err)
		}
	}
}

func containsAny(s string, subs ...string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

// A network failure is a retry whose error names the endpoint's path but
// not its query (Binance's signature).
func TestBrokerNetworkErrorHidesQuery(t *testing.T) {
	t.Parallel()
	_, srv := newFakeBinance(t, "key-1", "secret-1", nil)
	url := srv.URL
	srv.Close()
	bn := trades.NewBinance(url, nil, nil)
	_, err := bn.FetchTrades(context.Background(), trades.FetchRequest{UserID: "u1", AccessToken: "key-1:secret-1", Since: time.Now()})
	if err == nil || containsAny(err.Error(), "signature", "timestamp=") || !strings.Contains(err.Error(), "/api/v3/myTrades") {
		t.Fatalf("error %v", err)
	}
	if c := stages.Classify(trades.ClassifyFetchError(err, 0, 0)); c.Kind != stages.KindRetry || c.Rule != trades.RuleBrokerFetch {
		t.Fatalf("classified %+v", c)
	}
}
