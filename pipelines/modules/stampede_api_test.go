package modules

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/internal/opshttp"
)

// On the real stack, with the default rate limit and a 200 ms upstream:
// within one second, 50 records produced straight to modules.refresh (as
// kcat would) and 50 concurrent POST /api/v1/modules/refresh of the same
// key through the ops server the services mount their API on cost exactly
// one upstream call, and every API answer comes in under 1 s.
func TestRealStackStampedeAPI(t *testing.T) {
	needsRealStack(t)
	t.Parallel()
	f := newSvcFixture(t, nil, func(c *Config) { c.RateLimit.Windows = nil })
	f.src.inner = NewSynthetic(SyntheticConfig{Latency: 200 * time.Millisecond})
	ops := opshttp.New(f.reg, slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn})))
	f.env.Ops = ops
	f.start(t)
	ctx, cancel := context.WithCancel(f.ctx)
	defer cancel()
	addr, _, err := ops.ListenAndServe(ctx, opshttp.Listen{Addr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + addr.String() + "/api/v1/modules/refresh"
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}

	const n, key = 50, "APIS:options_flow"
	var wg sync.WaitGroup
	codes := make([]int, n)
	latencies := make([]time.Duration, n)
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			// Five bursts of ten concurrent requests, 200 ms apart: some
			// find the module absent, some refreshing, some fresh.
			time.Sleep(time.Duration(i/10) * 200 * time.Millisecond)
			begin := time.Now()
			resp, err := client.Post(url, "application/json", bytes.NewReader([]byte(`{"ticker":"apis","module":"options_flow"}`)))
			if err != nil {
				t.Errorf("request %d: %v", i, err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			codes[i], latencies[i] = resp.StatusCode, time.Since(begin)
		}()
	}
	began := time.Now()
	close(start)
	for range n {
		f.produce(t, &kgo.Record{Key: []byte(key), Value: request("APIS", ModuleOptionsFlow)})
		time.Sleep(20 * time.Millisecond)
	}
	wg.Wait()
	if d := time.Since(began); d > 2*time.Second {
		t.Logf("the stampede took %v (loaded machine)", d)
	}
	accepted := 0
	for i, c := range codes {
		switch c {
		case http.StatusAccepted:
			accepted++
		case http.StatusOK:
		default:
			t.Errorf("request %d answered %d", i, c)
		}
	}
	f.waitRequests(t, float64(n+accepted))
	f.waitRow(t, "APIS", ModuleOptionsFlow, "row ready", func(r row) bool { return r.status == "ready" })
	if c := f.src.Calls(key); c != 1 {
		t.Errorf("upstream calls = %d, want 1", c)
	}
	maxLat := slices.Max(latencies)
	if maxLat >= time.Second {
		t.Errorf("slowest API answer %v, want < 1s (latencies %v)", maxLat, latencies)
	}
	if accepted == 0 {
		t.Errorf("no API request was accepted: none reached the refresh topic")
	}
	t.Logf("%d API requests (%d accepted, %d fresh), %d records, %v requests handled; slowest API answer %v",
		n, accepted, n-accepted, n, f.metric(t, "requests_total"), maxLat)
}
