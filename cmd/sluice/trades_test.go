package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/pipelines/trades"
)

// readAll returns every record of topic on the cluster of cl.
func readAll(t *testing.T, addrs []string, topic string, n int) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var recs []*kgo.Record
	for len(recs) < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("%d of %d records on %s", len(recs), n, topic)
		}
		recs = append(recs, fs.Records()...)
	}
	return recs
}

// sluice trades import sends an import command keyed by the user with the
// default since resolved (UTC today − 30 days) and prints its import id,
// straight to Kafka or through the API; trades status shows the state.
func TestTradesImportAndStatus(t *testing.T) {
	t.Parallel()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "tt.trades.import", "tt.trades.import.state"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// status reads only the state topic: it takes no --import-topic.
	statusFlags := []string{"--brokers", strings.Join(c.ListenAddrs(), ","), "--state-topic", "tt.trades.import.state"}
	flags := append([]string{"--import-topic", "tt.trades.import"}, statusFlags...)

	out, err := runCLI(t, append([]string{"trades", "import", "u1", "--since", "2025-01-01", "--force"}, flags...)...)
	if want := trades.ImportID("u1", "2025-01-01", "synthetic"); err != nil || strings.TrimSpace(out) != want {
		t.Fatalf("import: %v\n%s, want %s", err, out, want)
	}
	out, err = runCLI(t, append([]string{"trades", "import", "u2", "--broker", "binance"}, flags...)...)
	since := time.Now().UTC().AddDate(0, 0, -30).Format(time.DateOnly)
	if want := trades.ImportID("u2", since, "binance"); err != nil || strings.TrimSpace(out) != want {
		t.Fatalf("import with the default since: %v\n%s, want %s", err, out, want)
	}
	for _, bad := range [][]string{{"a@b.com"}, {"u3", "--broker", "kraken"}, {"u3", "--since", "2999-01-01"}} {
		if _, err := runCLI(t, append(append([]string{"trades", "import"}, bad...), flags...)...); err == nil {
			t.Errorf("import %v succeeded", bad)
		}
	}

	// Through the API of a running process.
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	mux := http.NewServeMux()
	for pattern, h := range trades.NewImports(cl, []kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...)},
		trades.ImportConfig{ImportTopic: "tt.trades.import", StateTopic: "tt.trades.import.state"}).Routes() {
		mux.Handle(pattern, h)
	}
	srv := httptest.NewServer(mux)
	defer srv.Close()
	out, err = runCLI(t, "trades", "import", "u4", "--since", "2025-02-01", "--api", srv.URL)
	if want := trades.ImportID("u4", "2025-02-01", "synthetic"); err != nil || strings.TrimSpace(out) != want {
		t.Fatalf("import --api: %v\n%s, want %s", err, out, want)
	}

	recs := readAll(t, c.ListenAddrs(), "tt.trades.import", 3)
	got := map[string]trades.ImportCommand{}
	for _, r := range recs {
		cmd, err := trades.DecodeCommand(r.Key, r.Value)
		if err != nil || cmd.Kind != trades.KindImport || string(r.Key) != cmd.Import.UserID {
			t.Fatalf("record %s: %v", r.Value, err)
		}
		got[cmd.Import.UserID] = *cmd.Import
	}
	if got["u1"].Since != "2025-01-01" || !got["u1"].Force || got["u2"].Since != since || got["u2"].Broker != "binance" || got["u4"].Since != "2025-02-01" {
		t.Fatalf("commands %+v", got)
	}

	// A state record, then status by id and by user.
	id := trades.ImportID("u1", "2025-01-01", "synthetic")
	st := trades.ImportState{ImportID: id, UserID: "u1", Kind: "import", Broker: "synthetic", Since: "2025-01-01", RunID: "r1",
		Status: trades.StatusFailed, Page: 2, Fetched: 200, Stored: 199, Rejected: 1, Reason: "retries_exhausted", Rule: trades.RuleBrokerFetch}
	v, _ := json.Marshal(st)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "tt.trades.import.state", Key: []byte(id), Value: v}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	out, err = runCLI(t, append([]string{"trades", "status", id}, statusFlags...)...)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if err != nil || len(lines) != 2 || !strings.HasPrefix(lines[0], "IMPORT_ID") {
		t.Fatalf("status: %v\n%s", err, out)
	}
	for _, want := range []string{id, "FAILED", "r1", "200", "199", trades.RuleBrokerFetch} {
		if !strings.Contains(lines[1], want) {
			t.Errorf("status row lacks %q: %s", want, lines[1])
		}
	}
	out, err = runCLI(t, append([]string{"trades", "status", "--user", "u1", "--json"}, statusFlags...)...)
	var back trades.ImportState
	if err != nil || json.Unmarshal([]byte(strings.TrimSpace(out)), &back) != nil || back.Stored != 199 || back.RunID != "r1" {
		t.Errorf("status --user --json: %v\n%s", err, out)
	}
	if _, err := runCLI(t, append([]string{"trades", "status", "--user", "nobody"}, statusFlags...)...); err == nil {
		t.Error("status of a user without imports succeeded")
	}
	if _, err := runCLI(t, append([]string{"trades", "status"}, statusFlags...)...); err == nil {
		t.Error("status without an id or --user succeeded")
	}
	resp, err := http.Get(srv.URL + "/api/v1/trades/imports/" + id)
	if err != nil {
		t.Fatal(err)
	}
	var api trades.ImportState
	_ = json.NewDecoder(resp.Body).Decode(&api)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || api.RunID != "r1" || api.Status != trades.StatusFailed {
		t.Errorf("GET import: %d %+v", resp.StatusCode, api)
	}
	for path, code := range map[string]int{"/api/v1/trades/imports/" + strings.Repeat("0", 64): 404, "/api/v1/trades/imports/nope": 400} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != code {
			t.Errorf("GET %s: %d, want %d", path, resp.StatusCode, code)
		}
	}
	resp, err = http.Post(srv.URL+"/api/v1/trades/imports", "application/json", strings.NewReader(`{"user_id":"a@b.com"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("POST with a bad user: %d, want 400", resp.StatusCode)
	}
}

// The trades environment: the dedupe window, the token key and the safety
// margin; a bad value is an error that never shows the key.
func TestTradesSettings(t *testing.T) {
	t.Setenv("TRADES_IMPORT_DEDUPE_WINDOW", "90m")
	t.Setenv("BROKER_RATE_LIMIT_SAFETY_MS", "400")
	t.Setenv("BROKER_TOKEN_KEY", strings.Repeat("ab", 32))
	c, err := tradesSettings()
	if err != nil || c.Import.DedupeWindow != 90*time.Minute || c.Import.RateLimitSafety != 400*time.Millisecond || c.Import.TokenKey == nil {
		t.Fatalf("settings %+v, %v", c.Import, err)
	}
	t.Setenv("BROKER_TOKEN_KEY", "not-a-key-secret-value")
	t.Setenv("TRADES_IMPORT_DEDUPE_WINDOW", "soon")
	_, err = tradesSettings()
	if err == nil || strings.Contains(err.Error(), "not-a-key-secret-value") || !strings.Contains(err.Error(), "TRADES_IMPORT_DEDUPE_WINDOW") || !strings.Contains(err.Error(), "BROKER_TOKEN_KEY") {
		t.Fatalf("bad settings: %v", err)
	}
}
