package main

import (
	"bytes"
	"testing"
	"time"

	"github.com/sluicehq/sluice/pipelines/trades"
)

// The corpus is deterministic, puts PerUser trades of every user in its
// weeks (each week non-empty), and exercises what the digest aggregates:
// all three labels, SELLs with lots, winning and losing SELLs.
func TestCorpus(t *testing.T) {
	t.Parallel()
	spec := corpusSpec{Users: 20, PerUser: 600, Weeks: 8, Start: time.Date(2025, 1, 6, 0, 0, 0, 0, time.UTC), Seed: 16}
	labels := map[string]int{}
	lots, wins, losses := 0, 0, 0
	for i := range spec.Users {
		recs, err := spec.userRecords(i)
		if err != nil {
			t.Fatal(err)
		}
		again, _ := spec.userRecords(i)
		if len(recs) != 600 || len(again) != 600 {
			t.Fatalf("user %d: %d records", i, len(recs))
		}
		perWeek := map[time.Time]int{}
		for k, r := range recs {
			if !bytes.Equal(r.Value, again[k].Value) {
				t.Fatalf("user %d record %d differs between runs", i, k)
			}
			if k > 0 && r.TS.Before(recs[k-1].TS) {
				t.Fatalf("user %d record %d out of ts order", i, k)
			}
			perWeek[trades.WeekOf(r.TS).Start]++
			for _, l := range r.Payload.Labels {
				labels[l]++
			}
			lots += len(r.Payload.Lots)
			if r.Payload.Side == trades.Sell {
				switch r.Payload.RealizedPnL.Sign() {
				case 1:
					wins++
				case -1:
					losses++
				}
			}
		}
		for _, w := range spec.weeks() {
			if perWeek[w.Start] != 75 {
				t.Errorf("user %d week %s: %d trades, want 75", i, w.StartDate(), perWeek[w.Start])
			}
		}
	}
	for _, l := range []string{trades.LabelOvertrading, trades.LabelRevengeTrading, trades.LabelSizeEscalation} {
		if labels[l] == 0 {
			t.Errorf("no trade labelled %s", l)
		}
	}
	if lots == 0 || wins == 0 || losses == 0 {
		t.Errorf("lots %d wins %d losses %d", lots, wins, losses)
	}
	t.Logf("labels %v lots %d wins %d losses %d", labels, lots, wins, losses)
}
