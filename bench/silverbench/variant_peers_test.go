package main

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/pipelines/silver"
)

func TestJDBCURLKeepsCredentialsSchemaAndSSLMode(t *testing.T) {
	got, err := jdbcURL("postgres://u%40x:p%26w@db.example:5433/sluice?sslmode=disable&search_path=bench_1_k")
	if err != nil {
		t.Fatal(err)
	}
	prefix := "jdbc:postgresql://db.example:5433/sluice?"
	if !strings.HasPrefix(got, prefix) {
		t.Fatalf("jdbcURL = %q, want prefix %q", got, prefix)
	}
	q, err := url.ParseQuery(strings.TrimPrefix(got, prefix))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"user": "u@x", "password": "p&w", "sslmode": "disable", "currentSchema": "bench_1_k", "reWriteBatchedInserts": "true"}
	for k, v := range want {
		if q.Get(k) != v {
			t.Errorf("%s = %q, want %q (url %q)", k, q.Get(k), v, got)
		}
	}
	if _, err := jdbcURL("host=db user=u search_path=s"); err == nil {
		t.Error("a keyword/value DATABASE_URL was accepted; the JDBC peer needs a postgres:// URL")
	}
}

func TestFirstRunningReadsTheFirstRunningState(t *testing.T) {
	start := time.UnixMilli(1_000_000)
	log := filepath.Join(t.TempDir(), "peer.log")
	text := "[main] INFO config…\n" +
		`{"state":"REBALANCING","at_ms":1001000}` + "\n" +
		`{"state":"RUNNING","at_ms":1004500}` + "\n" +
		`{"state":"RUNNING","at_ms":1009000}` + "\n"
	if err := os.WriteFile(log, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := firstRunning(log, start); got != 4500*time.Millisecond {
		t.Errorf("firstRunning = %s, want 4.5s", got)
	}
	if got := firstRunning(filepath.Join(t.TempDir(), "none.log"), start); got != 0 {
		t.Errorf("firstRunning of a missing log = %s, want 0", got)
	}
}

// A peer whose rows or dead letters differ from the expected ones fails
// its checks and is left out of the ratios; one whose output matches is
// counted.
func TestVerifyPeersLeavesADifferingPeerOutOfTheRatios(t *testing.T) {
	p := &prepared{
		recs:    make([]silver.Record, 4),
		valid:   3,
		dlq:     map[string]int{"sanity_fail ta.symbol": 1},
		finalTA: make([]silver.TARow, 2),
		finalSA: make([]silver.SARow, 1),
	}
	good := tableSums{ta: tableSum{2, "10"}, sa: tableSum{1, "20"}}
	r := &results{cfg: &config{n: 4}, p: p, a: &resultA{run: time.Second},
		sums: map[string]tableSums{"c": good, "k": good, "w": {ta: tableSum{2, "11"}, sa: tableSum{1, "20"}}}}
	k := &resultPeer{name: peerKStreams, run: 8 * time.Second, dlq: map[string]int{"sanity_fail ta.symbol": 1}, dlqTotal: 1}
	w := &resultPeer{name: peerWatermill, run: 40 * time.Second, dlq: map[string]int{"sanity_fail ta.symbol": 1}, dlqTotal: 1}
	r.peers = []*resultPeer{k, w}
	r.verify()

	if !k.counted() {
		t.Errorf("k matched the expected output but is not counted (differs: %v)", k.differs)
	}
	if w.counted() || len(w.differs) != 1 || !strings.HasPrefix(w.differs[0], "contents") {
		t.Errorf("w's ta contents differ: want it not counted for its contents, got differs %v", w.differs)
	}
	var lines []string
	r.peerRatios(func(f string, args ...any) { lines = append(lines, fmt.Sprintf(f, args...)) })
	if len(lines) != 2 || !strings.Contains(lines[0], "| a/k (records/s of a over k's) | 8.0 |") || !strings.Contains(lines[1], "| a/w | – (output differs: not counted)") {
		t.Errorf("ratio lines = %q: want a/k measured and a/w not counted", lines)
	}
}
