package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
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
		{[]string{"--modules-requests", "0"}, "invalid --modules-requests 0 (want ≥ 1)"},
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

// demo --keep --ops-addr :0 printed "curl -s http://:0/metrics", the flag's
// value, instead of the address the ops server listens on; with the ops
// server disabled (--ops-addr "") it printed "curl -s http:///metrics". It
// now prints the bound address (localhost for an unspecified IP), which
// serves the metrics, and no curl line without an ops server.
func TestDemoKeepPrintsBoundOpsAddr(t *testing.T) {
	t.Parallel()
	srv := testkit.NewPostgresServer(t)
	for _, opsAddr := range []string{":0", ""} {
		t.Run("ops-addr="+opsAddr, func(t *testing.T) {
			t.Parallel()
			db := srv.Postgres(t)
			out, cancel, done := startKeptDemo(t, "Everything keeps running", "--object-store-dir", t.TempDir(),
				"--database-url", db.URL, "--ops-addr", opsAddr, "--console-addr", "", "--records", "10")
			defer cancel()
			text := out.String()
			// The produce hint keys records as sluice's producers do.
			if !strings.Contains(text, "-P -t bronze.records -K: -X topic.partitioner=murmur2_random") {
				t.Fatalf("the kcat produce hint lacks murmur2_random:\n%s", text)
			}
			curl := regexp.MustCompile(`curl -s http://(\S*)/metrics`).FindStringSubmatch(text)
			if opsAddr == "" {
				if curl != nil || strings.Contains(text, "http://") {
					t.Fatalf("ops server disabled, yet a curl hint:\n%s", text)
				}
			} else {
				if curl == nil {
					t.Fatalf("no curl hint:\n%s", text)
				}
				host, port, err := net.SplitHostPort(curl[1])
				if err != nil || host != "localhost" || port == "0" || port == "" {
					t.Fatalf("curl hint address %q (%v): want localhost and the bound port\n%s", curl[1], err, text)
				}
				resp, err := http.Get("http://" + curl[1] + "/metrics")
				if err != nil {
					t.Fatalf("GET the printed address: %v", err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "sluice_") {
					t.Fatalf("GET http://%s/metrics: %s\n%.500s", curl[1], resp.Status, body)
				}
			}
			checkModulesDemo(t, text, opsAddr != "")
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("demo after Ctrl-C: %v\n%s", err, out)
				}
			case <-time.After(time.Minute):
				t.Fatal("demo did not stop after its context ended")
			}
		})
	}
}

// startKeptDemo runs `sluice demo --keep` on an embedded Kafka on a free
// port, embedded Redis and 3 smap items, with args added, until its output
// holds ready; it fails the test if the demo returns first or takes more
// than 3 minutes. Cancel the demo and read its result from done.
func startKeptDemo(t *testing.T, ready string, args ...string) (*testkit.Buffer, context.CancelFunc, chan error) {
	t.Helper()
	root := newRootCmd()
	out := &testkit.Buffer{}
	root.SetOut(out)
	root.SetErr(out)
	root.SetArgs(append([]string{"demo", "--keep", "--brokers=", "--redis-url=", "--s3-endpoint=", "--kafka-addr", "127.0.0.1:0",
		"--smap-items", "3", "--timeout", "90s"}, args...))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- execute(ctx, root) }()
	deadline := time.After(3 * time.Minute)
	for !strings.Contains(out.String(), ready) {
		select {
		case err := <-done:
			cancel()
			t.Fatalf("demo returned before keeping running: %v\n%s", err, out)
		case <-deadline:
			cancel()
			t.Fatalf("demo did not finish its scenarios:\n%s", out)
		case <-time.After(200 * time.Millisecond):
		}
	}
	return out, cancel, done
}

func TestDialAddr(t *testing.T) {
	t.Parallel()
	cases := map[string]*net.TCPAddr{
		"localhost:9464": {IP: net.IPv6unspecified, Port: 9464},
		"localhost:8080": {IP: net.IPv4zero, Port: 8080},
		"127.0.0.1:4321": {IP: net.IPv4(127, 0, 0, 1), Port: 4321},
		"[::1]:80":       {IP: net.IPv6loopback, Port: 80},
	}
	for want, a := range cases {
		if got := dialAddr(a); got != want {
			t.Errorf("dialAddr(%v) = %q, want %q", a, got, want)
		}
	}
}
