package main

import (
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/console"
	"github.com/sluicehq/sluice/internal/testkit"
)

// A console on a non-loopback address without a token fails at start,
// before it connects to anything.
func TestConsoleRefusesNonLoopbackWithoutToken(t *testing.T) {
	t.Setenv(console.TokenEnv, "")
	for _, args := range [][]string{
		{"console", "--addr", "0.0.0.0:0", "--brokers", "127.0.0.1:1"},
		{"run", "silver", "--console", ":8080", "--brokers", "127.0.0.1:1"},
	} {
		_, err := runCLI(t, args...)
		singleLine(t, err, "refusing to listen on")
	}
}

// demo --keep prints an export line for the services it started and the
// console's URL; the commands it names work with those values, and the
// console serves the demo's groups.
func TestDemoKeepPrintsExportsAndServesConsole(t *testing.T) {
	t.Parallel()
	db := testkit.NewPostgresServer(t).Postgres(t)
	objects := t.TempDir()
	out, cancel, done := startKeptDemo(t, "console: http://", "--object-store-dir", objects, "--database-url", db.URL,
		"--ops-addr", "", "--console-addr", "127.0.0.1:0", "--records", "20")
	defer cancel()
	text := out.String()
	exports := regexp.MustCompile(`(?m)^  export (.*)$`).FindStringSubmatch(text)
	if exports == nil {
		t.Fatalf("no export line:\n%s", text)
	}
	env := map[string]string{}
	for _, kv := range strings.Fields(exports[1]) {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = strings.Trim(v, "'")
	}
	// DATABASE_URL came from the caller: named, not printed.
	if env["KAFKA_BROKERS"] == "" || env["REDIS_URL"] == "" || env["OBJECT_STORE_DIR"] != objects || env["DATABASE_URL"] != "" {
		t.Fatalf("exports %v: want KAFKA_BROKERS, REDIS_URL and OBJECT_STORE_DIR=%s, not DATABASE_URL\n%s", env, objects, text)
	}
	if !strings.Contains(text, "# and the DATABASE_URL of this shell") || strings.Contains(text, db.URL) {
		t.Fatalf("DATABASE_URL from the environment: want it named, not printed\n%s", text)
	}
	project := regexp.MustCompile(`project (\S+) items`).FindStringSubmatch(text)
	if project == nil {
		t.Fatalf("no smap project in the summary:\n%s", text)
	}
	// Each command takes the flags of the services it uses.
	kafka := []string{"--brokers", env["KAFKA_BROKERS"]}
	for _, c := range []struct {
		args []string
		want string
	}{
		{append([]string{"lag", "--group", "silver"}, kafka...), "silver"},
		{append([]string{"dlq", "inspect", "--limit", "1"}, kafka...), "record(s)"},
		{[]string{"migrate", "--status", "--database-url", db.URL}, "control_flags"},
		{append([]string{"ingest", "status"}, kafka...), "COMPLETED"},
		{[]string{"smap", "progress", project[1], "--json", "--redis-url", env["REDIS_URL"]}, `"status":"DONE"`},
	} {
		got, err := runCLI(t, c.args...)
		if err != nil || !strings.Contains(got, c.want) {
			t.Errorf("sluice %s against the demo: %v\n%s", strings.Join(c.args, " "), err, got)
		}
	}
	u := regexp.MustCompile(`console: (http://\S+/)`).FindStringSubmatch(text)[1]
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `id="group-silver"`) || !strings.Contains(string(body), `id="group-smap-analytics"`) {
		t.Fatalf("GET %s = %s:\n%.3000s", u, resp.Status, body)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("demo after Ctrl-C: %v\n%s", err, out)
		}
	case <-time.After(time.Minute):
		t.Fatal("demo did not stop after its context ended")
	}
}
