package main

import (
	"context"
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/pipelines/trades"
)

// The demo's trades scenario imports synthetic trades for one user and
// pushes a known bias pattern for another, then requests both users'
// digests of the week. Its summary counts equal what Postgres holds, the
// bias_tags by label are what trades.Score labels in the stored histories
// (the push's are those of the known pattern), and each digest object
// aggregates all of its user's scored trades.
func TestDemoTradesScenario(t *testing.T) {
	t.Parallel()
	pg := testkit.NewPostgres(t)
	dir := t.TempDir()
	out, err := runCLI(t, "demo", "--brokers=", "--redis-url=", "--s3-endpoint=", "--object-store-dir", dir,
		"--database-url", pg.URL, "--kafka-addr", "127.0.0.1:0", "--ops-addr", "",
		"--records", "10", "--smap-items", "3", "--timeout", "50s")
	if err != nil {
		t.Fatalf("demo: %v\n%s", err, out)
	}
	m := regexp.MustCompile(`users (\S+) \(synthetic import\) and (\S+) \(push\); week (\S+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no trades users line:\n%s", out)
	}
	importUser, pushUser, week := m[1], m[2], m[3]
	summary := map[string]int64{}
	for _, r := range regexp.MustCompile(`(?m)^\s*trades\s+(.+?)\s+(\d+)\s*$`).FindAllStringSubmatch(out, -1) {
		n, _ := strconv.ParseInt(r[2], 10, 64)
		summary[r[1]] = n
	}

	ctx := context.Background()
	wantTags := map[string]int64{}
	wantByUser := map[string]map[string]int{}
	var wantTrades int64
	for _, user := range []string{importUser, pushUser} {
		history, err := trades.LoadHistory(ctx, pg.Pool, user)
		if err != nil {
			t.Fatal(err)
		}
		wantTrades += int64(len(history))
		wantByUser[user] = map[string]int{}
		for _, s := range trades.Score(history, time.Time{}) {
			for _, l := range s.Labels {
				wantTags[l.Name]++
				wantByUser[user][l.Name]++
			}
		}
		if user != pushUser {
			continue
		}
		// The stored push is the known pattern: scoring the pattern itself
		// gives the same labels, and it shows every label.
		if len(history) == 0 {
			t.Fatalf("no trades stored for %s", user)
		}
		pattern := trades.DemoPushTrades(history[0].TS)
		var norm []trades.Trade
		for _, r := range pattern {
			tr, err := r.Normalize(user, trades.BrokerCoinbase, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			norm = append(norm, tr)
		}
		fromPattern := map[string]int{}
		for _, s := range trades.Score(norm, time.Time{}) {
			for _, l := range s.Labels {
				fromPattern[l.Name]++
			}
		}
		if len(history) != len(pattern) || !maps.Equal(fromPattern, wantByUser[user]) {
			t.Fatalf("push stored %d trades labelled %v; the pattern has %d labelled %v", len(history), wantByUser[user], len(pattern), fromPattern)
		}
		for _, l := range []string{trades.LabelOvertrading, trades.LabelRevengeTrading, trades.LabelSizeEscalation} {
			if fromPattern[l] == 0 {
				t.Fatalf("the push pattern has no %s: %v", l, fromPattern)
			}
		}
	}
	if wantTrades != 12+int64(len(trades.DemoPushTrades(time.Time{}))) || summary["trades stored"] != wantTrades {
		t.Fatalf("trades stored: summary %d, Postgres %d\n%s", summary["trades stored"], wantTrades, out)
	}

	rows, err := pg.Pool.Query(ctx, `SELECT b.label, count(*) FROM bias_tags b JOIN trades t ON t.id = b.trade_id
		WHERE t.user_id = ANY($1) AND b.reflected_at IS NOT NULL GROUP BY b.label`, []string{importUser, pushUser})
	if err != nil {
		t.Fatal(err)
	}
	gotTags := map[string]int64{}
	for rows.Next() {
		var l string
		var n int64
		if err := rows.Scan(&l, &n); err != nil {
			t.Fatal(err)
		}
		gotTags[l] = n
	}
	rows.Close()
	if !maps.Equal(gotTags, wantTags) {
		t.Fatalf("bias_tags by label %v, Score says %v", gotTags, wantTags)
	}
	for l, n := range wantTags {
		if summary["bias_tags "+l] != n {
			t.Fatalf("summary bias_tags %s = %d, want %d\n%s", l, summary["bias_tags "+l], n, out)
		}
	}

	digests := 0
	for _, user := range []string{importUser, pushUser} {
		var key string
		var start time.Time
		if err := pg.Pool.QueryRow(ctx, `SELECT object_key, period_start FROM digests WHERE user_id = $1`, user).Scan(&key, &start); err != nil {
			t.Fatalf("digest of %s: %v", user, err)
		}
		if start.Format(time.DateOnly) != week {
			t.Fatalf("digest of %s starts %s, want %s", user, start, week)
		}
		b, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(key)))
		if err != nil {
			t.Fatalf("digest object of %s: %v", user, err)
		}
		var d trades.DigestObject
		if err := json.Unmarshal(b, &d); err != nil {
			t.Fatal(err)
		}
		history, _ := trades.LoadHistory(ctx, pg.Pool, user)
		if d.UserID != user || d.Agg.Trades != len(history) || !maps.Equal(d.Agg.CountsByLabel, wantByUser[user]) {
			t.Fatalf("digest object of %s: %s; want %d trades labelled %v", user, b, len(history), wantByUser[user])
		}
		digests++
	}
	if k := "digests emitted (objects " + trades.DigestObjectKey("{user}", trades.WeekOf(mustDate(t, week))) + ")"; summary[k] != int64(digests) {
		t.Fatalf("summary %q = %d, want %d\n%s", k, summary[k], digests, out)
	}
}

func mustDate(t *testing.T, s string) time.Time {
	t.Helper()
	d, err := time.Parse(time.DateOnly, s)
	if err != nil {
		t.Fatal(err)
	}
	return d
}
