package main

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit"
)

// TestMain gives the package's tests one local PostgreSQL for the whole
// test binary when DATABASE_URL is unset (testkit.MainWithPostgres).
func TestMain(m *testing.M) {
	os.Exit(testkit.MainWithPostgres(m))
}

// The ready clock learns of a key's first ready write when its transaction
// commits, not before, and keeps the first time per key.
func TestReadyClockTimesCommits(t *testing.T) {
	pg := testkit.NewPostgres(t)
	ctx := t.Context()
	if _, err := pg.Pool.Exec(ctx, `CREATE TABLE tdm (ticker TEXT PRIMARY KEY, status TEXT NOT NULL)`+";"+readyTriggerSQL("tdm")); err != nil {
		t.Fatal(err)
	}
	clock, err := startReadyClock(ctx, pg.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := clock.close(context.Background()); err != nil {
			t.Error(err)
		}
	}()
	if _, err := pg.Pool.Exec(ctx, `INSERT INTO tdm VALUES ('A', 'ready'), ('B', 'refreshing')`); err != nil {
		t.Fatal(err)
	}
	if n, _, err := clock.wait(ctx, 1, time.Now().Add(10*time.Second)); err != nil || n != 1 {
		t.Fatalf("after A ready: %d keys, %v", n, err)
	}
	firstA, _ := clock.lastReady()
	tx, err := pg.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `UPDATE tdm SET status = 'ready'`); err != nil {
		t.Fatal(err)
	}
	if n, _, err := clock.wait(ctx, 2, time.Now().Add(300*time.Millisecond)); err != nil || n != 1 {
		t.Fatalf("B ready, not committed: %d keys seen, %v; want 1", n, err)
	}
	committed := time.Now()
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	n, last, err := clock.wait(ctx, 2, time.Now().Add(10*time.Second))
	if err != nil || n != 2 {
		t.Fatalf("after the commit: %d keys, %v", n, err)
	}
	if last.Before(committed) {
		t.Errorf("B timed at %s, before its commit at %s", last, committed)
	}
	clock.mu.Lock()
	a := clock.first["A"]
	clock.mu.Unlock()
	if !a.Equal(firstA) {
		t.Errorf("A's second ready write moved its time: %s → %s", firstA, a)
	}
}
