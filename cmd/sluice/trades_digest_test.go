package main

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/pipelines/trades"
	"github.com/sluicehq/sluice/schemas"
	"github.com/sluicehq/sluice/topics"
)

// trades score and trades digest send their request events keyed by the
// user; bad input fails before anything is sent; rebuild-digests
// re-publishes trade.scored of the user's trades from Postgres.
func TestTradesScoreDigestCommands(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.ForceFake())
	prefix := testkit.Name(t, "cli") + "."
	adm := k.Admin(t)
	for _, name := range []string{topics.TradesEvents, topics.TradesBias} {
		if _, err := adm.CreateTopic(testkit.Context(t), 3, -1, nil, prefix+name); err != nil {
			t.Fatal(err)
		}
	}
	brokers := strings.Join(k.Brokers, ",")
	events := func(topic string) []trades.Event[json.RawMessage] {
		var out []trades.Event[json.RawMessage]
		for _, r := range k.ReadTopic(t, prefix+topic) {
			var e trades.Event[json.RawMessage]
			if err := json.Unmarshal(r.Value, &e); err != nil || string(r.Key) != "u1" {
				t.Fatalf("%s record %q %s: %v", topic, r.Key, r.Value, err)
			}
			out = append(out, e)
		}
		return out
	}

	if out, err := runCLI(t, "trades", "score", "u1", "--since", "2025-01-06", "--brokers", brokers, "--topic-prefix", prefix); err != nil {
		t.Fatalf("score: %v\n%s", err, out)
	}
	evs := events(topics.TradesEvents)
	if len(evs) != 1 || evs[0].Type != trades.TypeScoreRequest || string(evs[0].Payload) != `{"user_id":"u1","since":"2025-01-06"}` {
		t.Fatalf("score.request %+v", evs)
	}
	if out, err := runCLI(t, "trades", "digest", "u1", "--week", "2025-W02", "--brokers", brokers, "--topic-prefix", prefix); err != nil {
		t.Fatalf("digest: %v\n%s", err, out)
	}
	evs = events(topics.TradesBias)
	if len(evs) != 1 || evs[0].Type != trades.TypeDigestRequest || string(evs[0].Payload) != `{"user_id":"u1","period_start":"2025-01-06"}` {
		t.Fatalf("digest.request %+v", evs)
	}
	// Through a running ops server's API (--api).
	srv := httptest.NewServer(trades.DigestsHandler(trades.NewRequester(k.Client(t), prefix+topics.TradesEvents, prefix+topics.TradesBias), nil))
	defer srv.Close()
	if out, err := runCLI(t, "trades", "digest", "u1", "--week", "2025-W03", "--api", srv.URL); err != nil || !strings.Contains(out, "2025-01-13..2025-01-20") {
		t.Fatalf("digest --api: %v\n%s", err, out)
	}
	if _, err := runCLI(t, "trades", "digest", "x@y.z", "--week", "2025-W03", "--api", srv.URL); err == nil {
		t.Error("digest --api accepted a bad user id")
	}
	evs = events(topics.TradesBias)
	if len(evs) != 2 || string(evs[1].Payload) != `{"user_id":"u1","period_start":"2025-01-13"}` {
		t.Fatalf("digest.request through the API %+v", evs)
	}
	for _, bad := range [][]string{
		{"trades", "score", "u1"},
		{"trades", "score", "u1", "--since", "2999-01-01"},
		{"trades", "score", "a@b.c", "--since", "2025-01-06"},
		{"trades", "digest", "u1", "--week", "2025-W99"},
		{"trades", "digest", "u1"},
	} {
		if _, err := runCLI(t, append(bad, "--brokers", brokers, "--topic-prefix", prefix)...); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
	if n := len(events(topics.TradesEvents)) + len(events(topics.TradesBias)); n != 3 {
		t.Errorf("refused commands sent %d events", n-3)
	}

	pg := testkit.NewPostgres(t)
	if _, err := schemas.Migrate(testkit.Context(t), pg.URL); err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2025, 1, 6, 9, 0, 0, 0, time.UTC)
	for i, side := range []string{"BUY", "SELL", "BUY"} {
		ext := string(rune('a' + i))
		if _, err := pg.Pool.Exec(testkit.Context(t), `INSERT INTO trades (id, user_id, broker, ext_id, symbol, side, qty, price, fee, ts)
			VALUES ($1, 'u1', 'synthetic', $2, 'BTC-USD', $3, 1, 100, 0, $4)`,
			trades.TradeID("u1", "synthetic", ext), ext, side, t0.Add(time.Duration(i)*time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	out, err := runCLI(t, "trades", "rebuild-digests", "u1", "--since", "2025-01-06T10:00:00Z", "--brokers", brokers,
		"--topic-prefix", prefix, "--database-url", pg.URL)
	if err != nil || !strings.Contains(out, "2 trade.scored re-published") {
		t.Fatalf("rebuild-digests: %v\n%s", err, out)
	}
	evs = events(topics.TradesBias)
	if len(evs) != 4 || evs[2].Type != trades.TypeTradeScored || evs[3].Type != trades.TypeTradeScored {
		t.Fatalf("trade.scored %+v", evs)
	}
	s, err := trades.DecodeTradeScored(evs[2].Payload)
	if err != nil || s.ExtID != "b" || s.Side != trades.Sell || s.RealizedPnL == nil || !s.RealizedPnL.IsZero() || len(s.Lots) != 1 {
		t.Errorf("re-published trade.scored %+v (%v)", s, err)
	}
}
