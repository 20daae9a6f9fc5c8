package main

import (
	"net"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit"
)

// demo --records 0 used to be accepted and then wait the whole --timeout
// (5 minutes by default) for a silver group that had nothing to consume;
// --smap-items 0 or less silently became 300. Such values now fail before
// anything is started.
func TestDemoBadFlags(t *testing.T) {
	t.Parallel()
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--records", "0"}, "invalid --records 0 (want ≥ 1)"},
		{[]string{"--records", "-3"}, "invalid --records -3 (want ≥ 1)"},
		{[]string{"--smap-items", "0"}, "invalid --smap-items 0 (want ≥ 1)"},
		{[]string{"--smap-items", "-5"}, "invalid --smap-items -5 (want ≥ 1)"},
		{[]string{"--timeout", "0s"}, "invalid --timeout 0s (want > 0)"},
	}
	for _, tc := range cases {
		start := time.Now()
		// Unreachable services: an attempt to connect would fail with
		// another message.
		args := append([]string{"demo", "--brokers", "127.0.0.1:1", "--database-url", "postgres://u@127.0.0.1:1/db",
			"--redis-url", "redis://127.0.0.1:1/0", "--ops-addr", ""}, tc.args...)
		_, err := runCLI(t, args...)
		singleLine(t, err, tc.want)
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("%v: took %v to fail", tc.args, d)
		}
	}
}

// demo ran the pipelines in the background while the scenarios waited for
// their results: when the pipelines stopped with an error — here the ops
// address is taken, so serving fails at once — the scenarios still waited
// the whole --timeout (5 minutes by default) and then reported a timeout.
// The demo now fails at once with the pipelines' error.
func TestDemoPipelinesFailFast(t *testing.T) {
	t.Parallel()
	pg := testkit.NewPostgres(t)
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	start := time.Now()
	// Everything but the database embedded; --brokers= and --redis-url=
	// override a stack's KAFKA_BROKERS/REDIS_URL, which the demo must not touch.
	_, err = runCLI(t, "demo", "--brokers=", "--redis-url=", "--s3-endpoint=", "--object-store-dir", t.TempDir(),
		"--database-url", pg.URL, "--kafka-addr", "127.0.0.1:0", "--ops-addr", busy.Addr().String(),
		"--records", "10", "--smap-items", "3", "--timeout", "50s")
	singleLine(t, err, "ops http listen "+busy.Addr().String())
	if d := time.Since(start); d > 40*time.Second {
		t.Fatalf("took %v to fail", d)
	}
}

// The embedded Kafka's port taken (a broker or another demo on :9092) is a
// one-line error naming the address, before anything else is started.
func TestDemoKafkaPortBusy(t *testing.T) {
	t.Parallel()
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	start := time.Now()
	_, err = runCLI(t, "demo", "--brokers=", "--kafka-addr", busy.Addr().String(), "--ops-addr", "",
		"--database-url", "postgres://u@127.0.0.1:1/db", "--redis-url", "redis://127.0.0.1:1/0")
	singleLine(t, err, "embedded Kafka on "+busy.Addr().String())
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("took %v to fail", d)
	}
}
