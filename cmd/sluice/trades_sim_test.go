package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/pipelines/trades"
	"github.com/sluicehq/sluice/schemas"
)

// runTradesSim runs the sim command alone (the trades group is not needed)
// and returns its output.
func runTradesSim(t *testing.T, g *globalConfig, args ...string) (string, error) {
	t.Helper()
	cmd := newTradesSimCmd(g)
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(args)
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := cmd.ExecuteContext(ctx)
	return out.String(), err
}

// `sluice trades sim` reads the trade from PostgreSQL, takes its closes from
// the synthetic vendor (market_bars has none), prints hold/actual curves and
// caches the answer: the second run says cached.
func TestTradesSimCommand(t *testing.T) {
	t.Parallel()
	pg := testkit.NewPostgres(t)
	rd := testkit.NewRedis(t, testkit.FakeOK())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := schemas.Migrate(ctx, pg.URL); err != nil {
		t.Fatal(err)
	}
	suffix := fmt.Sprintf("%08X", rand.Uint32())
	user, symbol := "simcli-"+suffix, "S"+suffix // unique cache and rate-limit keys on a shared Redis
	t.Cleanup(func() {
		keys, _ := rd.Client.Keys(context.Background(), "sim:"+user+":*").Result()
		keys2, _ := rd.Client.Keys(context.Background(), "rate_limit:marketdata:*:"+symbol+":*").Result()
		if keys = append(keys, keys2...); len(keys) > 0 {
			rd.Client.Del(context.Background(), keys...)
		}
	})
	at := time.Date(2025, 3, 3, 9, 0, 0, 0, time.UTC)
	id := trades.TradeID(user, "synthetic", "x1")
	if _, err := pg.Pool.Exec(ctx, `INSERT INTO trades (id, user_id, broker, ext_id, symbol, side, qty, price, fee, ts)
		VALUES ($1, $2, 'synthetic', 'x1', $3, 'BUY', 2, 100, 0.5, $4)`, id, user, symbol, at); err != nil {
		t.Fatal(err)
	}
	g := &globalConfig{DatabaseURL: pg.URL, RedisURL: rd.URL}

	out, err := runTradesSim(t, g, user, id, "--horizon-days", "1")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	closeH := trades.SyntheticClose(symbol, at.Add(24*time.Hour))
	wantDelta := "0.00000000" // no SELL: actual = hold
	for _, want := range []string{"horizon 1 d, bars from marketdata, cached false", "delta " + wantDelta,
		"coverage 1, partial false", at.Add(24 * time.Hour).Format(time.RFC3339)} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "\n"); n != 2+1+25 {
		t.Errorf("%d lines, want header 2 + 1 + 25 points:\n%s", n, out)
	}

	out, err = runTradesSim(t, g, user, id, "--horizon-days", "1", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var res struct {
		Cached bool             `json:"cached"`
		Delta  string           `json:"delta"`
		Curves []map[string]any `json:"curves"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	last := res.Curves[len(res.Curves)-1]
	hold := closeH.Sub(decimal.NewFromInt(100)).Mul(decimal.NewFromInt(2)).StringFixedBank(8) // qty 2 at 100
	if !res.Cached || res.Delta != wantDelta || len(res.Curves) != 25 || last["hold"] != hold {
		t.Errorf("json: cached %v delta %s points %d last %v, want cached, %s, 25, hold %s", res.Cached, res.Delta,
			len(res.Curves), last, wantDelta, hold)
	}
}

// Bad input fails before anything is opened; an unknown trade is named.
func TestTradesSimCommandErrors(t *testing.T) {
	t.Parallel()
	for _, h := range []string{"0", "91"} {
		_, err := runTradesSim(t, &globalConfig{}, "u1", "t1", "--horizon-days", h)
		if err == nil || !strings.Contains(err.Error(), "horizon") {
			t.Errorf("horizon %s: %v", h, err)
		}
	}
	if _, err := runTradesSim(t, &globalConfig{}, "u1"); err == nil {
		t.Error("one argument accepted")
	}
	if _, err := runTradesSim(t, &globalConfig{RedisURL: "redis://x"}, "u1", "t1"); err == nil ||
		!strings.Contains(err.Error(), "DATABASE_URL") {
		t.Errorf("no database: %v", err)
	}

	pg := testkit.NewPostgres(t)
	rd := testkit.NewRedis(t, testkit.FakeOK())
	if _, err := schemas.Migrate(context.Background(), pg.URL); err != nil {
		t.Fatal(err)
	}
	_, err := runTradesSim(t, &globalConfig{DatabaseURL: pg.URL, RedisURL: rd.URL}, "u1",
		trades.TradeID("u1", "synthetic", "missing"))
	if err == nil || !strings.Contains(err.Error(), "unknown trade") {
		t.Errorf("unknown trade: %v", err)
	}
}
