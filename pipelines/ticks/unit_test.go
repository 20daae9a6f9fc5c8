package ticks_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/opshttp"
	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/pipelines/ticks"
)

func TestSegmentKeyRoundTrip(t *testing.T) {
	key := ticks.SegmentKey("BRK.B", "2025-11-18", 1731853800000, "a1b2-c3d4")
	if key != "ticks/BRK.B/2025-11-18/part_1731853800000_a1b2-c3d4.parquet" {
		t.Fatalf("key %s", key)
	}
	n, err := ticks.ParseSegmentKey(key)
	if err != nil || n.Symbol != "BRK.B" || n.Date != "2025-11-18" || n.Start != 1731853800000 || n.Instance != "a1b2-c3d4" {
		t.Fatalf("parse = %+v, %v", n, err)
	}
	for _, bad := range []string{"ticks/NQ/2025-11-18/x.parquet", "ticks/NQ/part_1_a.parquet", "other/NQ/d/part_1_a.parquet", "ticks/NQ/d/part_x_a.parquet", "ticks/NQ/d/part_1_.parquet", "ticks/NQ/d/part_1_a.csv"} {
		if _, err := ticks.ParseSegmentKey(bad); err == nil {
			t.Errorf("ParseSegmentKey(%q) accepted", bad)
		}
	}
}

func TestSyntheticSourceDeterministicAndBounded(t *testing.T) {
	ctx := context.Background()
	a := ticks.NewSynthetic(ticks.SyntheticConfig{Length: time.Minute, MeanGap: 20 * time.Millisecond})
	b := ticks.NewSynthetic(ticks.SyntheticConfig{Length: time.Minute, MeanGap: 20 * time.Millisecond})
	sess, err := a.TradingHours(ctx, "NQ", "2025-11-18")
	if err != nil {
		t.Fatal(err)
	}
	ny, _ := time.LoadLocation("America/New_York")
	if got := time.UnixMilli(sess.Start).In(ny).Format("15:04"); got != "09:30" || sess.End-sess.Start+1 != 60_000 || len(sess.CriticalRanges) != 1 {
		t.Fatalf("session %+v opens at %s", sess, got)
	}
	x, err := a.HistoricalTicks(ctx, "NQ", sess.Start, sess.End, 1000)
	if err != nil {
		t.Fatal(err)
	}
	y, _ := b.HistoricalTicks(ctx, "NQ", sess.Start, sess.End, 1000)
	if len(x) != 1000 || len(y) != 1000 {
		t.Fatalf("got %d and %d ticks, want the 1000 cap", len(x), len(y))
	}
	for i := range x {
		if x[i] != y[i] {
			t.Fatalf("tick %d differs between two sources: %+v vs %+v", i, x[i], y[i])
		}
		if i > 0 && x[i].TimeMs <= x[i-1].TimeMs {
			t.Fatalf("ticks %d and %d share or reverse a millisecond", i-1, i)
		}
	}
	other, _ := a.HistoricalTicks(ctx, "ES", sess.Start, sess.End, 10)
	if other[0] == x[0] {
		t.Error("two symbols got the same first tick")
	}
	// A window inside the session: every tick within [start, end].
	mid, _ := a.HistoricalTicks(ctx, "NQ", x[10].TimeMs, x[20].TimeMs, 1000)
	if len(mid) != 11 || mid[0] != x[10] || mid[10] != x[20] {
		t.Errorf("window returned %d ticks", len(mid))
	}
	if _, err := a.HistoricalTicks(ctx, "NQ", sess.Start, sess.End, 1001); err == nil {
		t.Error("max 1001 accepted")
	}
	var se *ticks.SourceError
	if _, err := a.TradingHours(ctx, "nq", "2025-11-18"); !errors.As(err, &se) || se.Transient {
		t.Errorf("bad symbol: %v, want a permanent SourceError", err)
	}
	f := ticks.NewSynthetic(ticks.SyntheticConfig{Fault: ticks.FaultEvery(2, ticks.PacingViolation)})
	_, e1 := f.HistoricalTicks(ctx, "NQ", sess.Start, sess.End, 5)
	_, e2 := f.HistoricalTicks(ctx, "NQ", sess.Start, sess.End, 5)
	if e1 != nil || !errors.As(e2, &se) || se.Type != ticks.ErrTypePacing || !se.Transient {
		t.Errorf("fault injection: %v, %v", e1, e2)
	}
}

func TestJobKeyValidation(t *testing.T) {
	for key, ok := range map[string]bool{"NQ:2025-11-18": true, "BRK.B:2025-01-02": true, "nq:2025-11-18": false, "NQ-2025-11-18": false, "NQ:2025-02-30": false, ":2025-11-18": false} {
		if _, _, err := ticks.SplitJobKey(key); (err == nil) != ok {
			t.Errorf("SplitJobKey(%q) = %v, want ok=%v", key, err, ok)
		}
	}
	st := ticks.JobState{StartTime: 1000, EndTime: 1999, Cursor: 1499}
	if p := st.Progress(); p != 0.5 {
		t.Errorf("progress %v, want 0.5", p)
	}
	st.Cursor = 999
	if p := st.Progress(); p != 0 {
		t.Errorf("progress before start %v, want 0", p)
	}
}

// Services mounts the API on the ops server, and DemoScenario triggers a
// few symbols and waits until they complete.
func TestServicesAndDemoScenario(t *testing.T) {
	t.Parallel()
	f := newFixture(t, ticks.SyntheticConfig{Length: 20 * time.Second}, func(c *ticks.Config) {
		c.Supervisor = ticks.SupervisorConfig{Enabled: true, Interval: 100 * time.Millisecond, StallAfter: time.Hour}
	})
	env := f.env
	env.Ops = opshttp.New(f.reg, env.Logger)
	svcs, err := ticks.Services(env, f.cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(svcs) != 2 || svcs[0].Name() != "ticks" || svcs[1].Name() != "ticks-supervisor" {
		t.Fatalf("services %v", svcs)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, len(svcs))
	for _, s := range svcs {
		go func() { done <- s.Run(ctx) }()
	}
	defer func() {
		cancel()
		for range svcs {
			if err := <-done; err != nil {
				t.Errorf("service: %v", err)
			}
		}
	}()
	testkit.WaitFor(t, 30*time.Second, "services ready", func() bool { return svcs[0].Ready() && svcs[1].Ready() })
	srv := httptest.NewServer(env.Ops.Handler())
	defer srv.Close()
	resp, err := http.Post(srv.URL+"/api/v1/ingest/trigger", "application/json", strings.NewReader(`{"symbol":"x"}`))
	if err != nil || resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("trigger route: %v %v", resp, err)
	}
	resp.Body.Close()
	sum, err := ticks.DemoScenario(testkit.ContextTimeout(t, 60*time.Second), env, f.cfg, "U1", testDate, "AAPL", "MSFT", "NVDA")
	if err != nil {
		t.Fatal(err)
	}
	if len(sum.Jobs) != 3 {
		t.Fatalf("summary %+v", sum)
	}
	var total int64
	for _, j := range sum.Jobs {
		if j.Status != ticks.StatusCompleted {
			t.Errorf("%s ended %s", j.JobKey, j.Status)
		}
		total += int64(len(mustTicks(t, f, j.Symbol)))
		f.checkExact(t, j.Symbol, 0)
	}
	if sum.Ticks != total {
		t.Errorf("summary counts %d ticks, want %d", sum.Ticks, total)
	}
	// The ops server exposes the worker's object-store calls: one Put per
	// segment file (the fixture's store wrapper is backend "other").
	resp, err = http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if want := fmt.Sprintf(`sluice_objstore_operations_total{backend="other",op="put",pipeline="ticks",result="ok"} %d`+"\n", sum.Segments); !strings.Contains(string(body), want) {
		t.Errorf("/metrics lacks %q", want)
	}
	resp, err = http.Get(srv.URL + "/api/v1/ingest/jobs/AAPL:" + testDate)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("GET job: %v %v", resp, err)
	}
	resp.Body.Close()
}

// The session opens at Open local time also on the days the exchange's
// clocks change (US DST starts 2025-03-09 and ends 2025-11-02).
func TestSyntheticOpensAtLocalTimeOnDSTDays(t *testing.T) {
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Skipf("no time zone data: %v", err)
	}
	src := ticks.NewSynthetic(ticks.SyntheticConfig{Location: ny})
	for _, date := range []string{"2025-03-07", "2025-03-09", "2025-11-02", "2025-11-03"} {
		sess, err := src.TradingHours(context.Background(), "NQ", date)
		if err != nil {
			t.Fatal(err)
		}
		open := time.UnixMilli(sess.Start).In(ny)
		if got := open.Format("2006-01-02 15:04"); got != date+" 09:30" {
			t.Errorf("%s: session opens at %s local, want %s 09:30", date, got, date)
		}
	}
}
