package main

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/schemas"
)

// sluice run trades connects the Redis of REDIS_URL and serves the sim on
// its ops server next to the imports API: an unknown trade is the sim's
// JSON 404, not the mux's "page not found".
func TestRunTradesServesSim(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.FakeOK())
	r := testkit.NewRedis(t, testkit.FakeOK())
	pg := testkit.NewPostgres(t)
	prefix := testkit.Name(t, "") + "."
	ctx := testkit.Context(t)
	if _, err := schemas.Migrate(ctx, pg.URL); err != nil {
		t.Fatal(err)
	}
	if _, err := runCLI(t, "topics", "ensure", "--brokers", strings.Join(k.Brokers, ","), "--prefix", prefix, "--log-level", "error"); err != nil {
		t.Fatal(err)
	}
	addr := testkit.ListenAddr(t)
	startCLI(t, "run", "trades", "--brokers", strings.Join(k.Brokers, ","), "--redis-url", r.URL,
		"--database-url", pg.URL, "--object-store-dir", t.TempDir(), "--s3-endpoint=", "--ops-addr", addr,
		"--topic-prefix", prefix, "--group-prefix", prefix, "--log-level", "error")
	var status int
	var body []byte
	testkit.WaitFor(t, 60*time.Second, "the sim route answering", func() bool {
		resp, err := http.Get("http://" + addr + "/api/v1/trades/u-1/trades/t-1/sim?horizon_days=7")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		status = resp.StatusCode
		body, _ = io.ReadAll(resp.Body)
		return status != http.StatusServiceUnavailable
	})
	var answer map[string]string
	if status != http.StatusNotFound || json.Unmarshal(body, &answer) != nil || answer["error"] != "unknown trade" {
		t.Fatalf("GET …/sim of an unknown trade: %d %s; want 404 {\"error\":\"unknown trade\"}", status, body)
	}
}
