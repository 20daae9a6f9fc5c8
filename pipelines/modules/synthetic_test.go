package modules

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"
)

// clock is a settable clock for the synthetic source.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time  { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Set(t time.Time) { c.mu.Lock(); c.now = t; c.mu.Unlock() }

func fetch(t *testing.T, s ModuleSource, ticker, module string) Snapshot {
	t.Helper()
	snap, err := s.Fetch(context.Background(), ticker, module)
	if err != nil {
		t.Fatalf("fetch %s %s: %v", ticker, module, err)
	}
	if !json.Valid(snap.Payload) {
		t.Fatalf("payload is not JSON: %s", snap.Payload)
	}
	return snap
}

// The content of a ticker × module changes once per bucket, and only then.
func TestSyntheticBuckets(t *testing.T) {
	t.Parallel()
	c := &clock{}
	s := NewSynthetic(SyntheticConfig{Now: c.Now})
	base := time.Date(2025, 3, 15, 10, 0, 0, 0, time.UTC) // a Saturday the 15th
	for _, tc := range []struct {
		module        string
		same, changed time.Duration // offsets from base
		dataDate      string
	}{
		{ModuleOptionsFlow, 59*time.Minute + 59*time.Second, time.Hour, ""},
		{ModulePriceAction, 4*time.Minute + 59*time.Second, 5 * time.Minute, ""},
		{ModuleDarkPool, 13*time.Hour + 59*time.Minute, 14 * time.Hour, ""}, // next UTC day
		{ModuleShortInterest, 13*time.Hour + 59*time.Minute, 14 * time.Hour, "2025-03-01"},
	} {
		c.Set(base)
		first := fetch(t, s, "NVDA", tc.module)
		if first.DataDate != tc.dataDate {
			t.Errorf("%s data_date %q, want %q", tc.module, first.DataDate, tc.dataDate)
		}
		c.Set(base.Add(tc.same))
		if again := fetch(t, s, "nvda", tc.module); string(again.Payload) != string(first.Payload) {
			t.Errorf("%s changed within its bucket", tc.module)
		}
		c.Set(base.Add(tc.changed))
		if next := fetch(t, s, "NVDA", tc.module); string(next.Payload) == string(first.Payload) {
			t.Errorf("%s did not change in the next bucket", tc.module)
		}
	}
	// short_interest's second bucket starts on the 16th.
	c.Set(time.Date(2025, 3, 16, 0, 0, 0, 0, time.UTC))
	if got := fetch(t, s, "NVDA", ModuleShortInterest).DataDate; got != "2025-03-16" {
		t.Errorf("data_date on the 16th = %s", got)
	}
	c.Set(time.Date(2025, 3, 31, 23, 59, 0, 0, time.UTC))
	if got := fetch(t, s, "NVDA", ModuleShortInterest).DataDate; got != "2025-03-16" {
		t.Errorf("data_date on the 31st = %s", got)
	}

	// Tickers and modules differ; another instance agrees (deterministic).
	c.Set(base)
	nvda := fetch(t, s, "NVDA", ModuleOptionsFlow)
	if string(fetch(t, s, "AAPL", ModuleOptionsFlow).Payload) == string(nvda.Payload) {
		t.Error("two tickers share a payload")
	}
	other := NewSynthetic(SyntheticConfig{Now: c.Now})
	if string(fetch(t, other, "NVDA", ModuleOptionsFlow).Payload) != string(nvda.Payload) {
		t.Error("another source instance answered differently")
	}
	var p struct {
		Ticker string           `json:"ticker"`
		Flows  []map[string]any `json:"flows"`
	}
	if err := json.Unmarshal(nvda.Payload, &p); err != nil || p.Ticker != "NVDA" || len(p.Flows) < 3 {
		t.Errorf("options_flow payload %s (%v)", nvda.Payload, err)
	}
	// The same data hashes alike: a refresh within a bucket reuses its analysis.
	h1, err1 := InputHash(ModuleOptionsFlow, "1", nvda.Payload)
	h2, err2 := InputHash(ModuleOptionsFlow, "1", fetch(t, s, "NVDA", ModuleOptionsFlow).Payload)
	if err1 != nil || err2 != nil || h1 != h2 {
		t.Errorf("hashes %s %s (%v %v)", h1, h2, err1, err2)
	}

	if _, err := s.Fetch(context.Background(), "NVDA", "insider_trades"); !errors.Is(err, ErrUnsupportedModule) {
		t.Errorf("unknown module: %v", err)
	}
}

func TestSyntheticFaults(t *testing.T) {
	t.Parallel()
	faults, err := ParseFaults("FAILX=transient,GONE=not_found,RL=rate_limited:3s,AUTH=unauthorized,BIG=too_large,NVDA:dark_pool=transient:2")
	if err != nil {
		t.Fatal(err)
	}
	s := NewSynthetic(SyntheticConfig{Faults: faults})
	ctx := context.Background()
	status := func(ticker, module string) int {
		_, err := s.Fetch(ctx, ticker, module)
		var ue *UpstreamError
		if errors.As(err, &ue) {
			return ue.Status
		}
		if err != nil {
			t.Fatalf("%s %s: %v", ticker, module, err)
		}
		return 200
	}
	for _, tc := range []struct {
		ticker, module string
		want           []int // statuses of successive calls
	}{
		{"FAILX", ModuleOptionsFlow, []int{503, 503, 503}},
		{"failx", ModuleDarkPool, []int{503}},
		{"GONE", ModulePriceAction, []int{404, 404}},
		{"AUTH", ModuleOptionsFlow, []int{401}},
		{"NVDA", ModuleDarkPool, []int{503, 503, 200, 200}}, // the first two calls of the key
		{"NVDA", ModuleOptionsFlow, []int{200}},             // other modules of NVDA are fine
		{"OK", ModuleOptionsFlow, []int{200}},
	} {
		for i, want := range tc.want {
			if got := status(tc.ticker, tc.module); got != want {
				t.Errorf("%s %s call %d: %d, want %d", tc.ticker, tc.module, i+1, got, want)
			}
		}
	}
	_, err = s.Fetch(ctx, "RL", ModuleOptionsFlow)
	var ue *UpstreamError
	if !errors.As(err, &ue) || ue.Status != 429 || ue.RetryAfter != 3*time.Second {
		t.Errorf("rate limited: %v", err)
	}
	snap, err := s.Fetch(ctx, "BIG", ModuleOptionsFlow)
	if err != nil || len(snap.Payload) != MaxPayloadBytes+1 || !json.Valid(snap.Payload) {
		t.Errorf("too large: %d bytes, %v", len(snap.Payload), err)
	}
}

// Latency (every call, and a ticker's latency fault) waits through Sleep,
// which ends with ctx.
func TestSyntheticLatency(t *testing.T) {
	t.Parallel()
	faults, err := ParseFaults("SLOWX=latency:30s")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var slept []time.Duration
	s := NewSynthetic(SyntheticConfig{Latency: 50 * time.Millisecond, Faults: faults,
		Sleep: func(ctx context.Context, d time.Duration) error {
			mu.Lock()
			slept = append(slept, d)
			mu.Unlock()
			if d > time.Second {
				return context.DeadlineExceeded // the caller's 30 s timeout fired first
			}
			return nil
		}})
	if _, err := s.Fetch(context.Background(), "FAST", ModuleOptionsFlow); err != nil {
		t.Fatal(err)
	}
	_, err = s.Fetch(context.Background(), "SLOWX", ModuleOptionsFlow)
	if !errors.Is(err, context.DeadlineExceeded) || UpstreamResult(err) != "transient" {
		t.Errorf("slow fetch: %v", err)
	}
	if len(slept) != 3 || slept[0] != 50*time.Millisecond || slept[1] != 50*time.Millisecond || slept[2] != 30*time.Second {
		t.Errorf("slept %v", slept)
	}

	// The default Sleep returns when ctx ends.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	slow := NewSynthetic(SyntheticConfig{Faults: faults})
	if _, err := slow.Fetch(ctx, "SLOWX", ModuleOptionsFlow); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled slow fetch: %v", err)
	}
}
