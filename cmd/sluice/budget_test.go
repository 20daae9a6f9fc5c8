package main

import (
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/schemas"
	"github.com/sluicehq/sluice/topics"
)

func TestParseBytes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want int64
		err  string
	}{
		{"0", 0, ""},
		{"1048576", 1 << 20, ""},
		{"512MiB", 512 << 20, ""},
		{"512Mi", 512 << 20, ""},
		{"512mib", 512 << 20, ""},
		{"1GiB", 1 << 30, ""},
		{"2Gi", 2 << 30, ""},
		{"64KiB", 64 << 10, ""},
		{"300MB", 300e6, ""},
		{"300M", 300e6, ""},
		{"1G", 1e9, ""},
		{" 256 MiB ", 256 << 20, ""},
		{"100B", 100, ""},
		{"", 0, "invalid size"},
		{"MiB", 0, "invalid size"},
		{"-1MiB", 0, "invalid size"},
		{"1.5GiB", 0, "invalid size"},
		{"12XB", 0, `unknown unit "XB"`},
		{"99999999999GiB", 0, "too large"},
	} {
		got, err := parseBytes(tc.in)
		switch {
		case tc.err == "" && (err != nil || got != tc.want):
			t.Errorf("parseBytes(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("parseBytes(%q) = %d, %v; want an error containing %q", tc.in, got, err, tc.err)
		}
	}
}

// An invalid --memory-budget or MEMORY_BUDGET is refused before the
// command connects anywhere.
func TestRunBadMemoryBudget(t *testing.T) {
	_, err := runCLI(t, "run", "silver", "--brokers", "127.0.0.1:1", "--memory-budget", "lots")
	singleLine(t, err, `invalid argument "lots" for "--memory-budget" flag: invalid size "lots"`)
	t.Setenv("MEMORY_BUDGET", "12XB")
	_, err = runCLI(t, "run", "silver", "--brokers", "127.0.0.1:1")
	singleLine(t, err, `invalid MEMORY_BUDGET="12XB"`)
}

// sluice run --memory-budget (or MEMORY_BUDGET) sets the budget the
// pipelines' runners share, which /metrics shows; without it the budget is
// derived from GOMEMLIMIT and the cgroup (run.BudgetFor).
func TestRunMemoryBudget(t *testing.T) {
	k := testkit.NewKafka(t, testkit.ForceFake()) // a private cluster: the catalog names are fixed
	pg := testkit.NewPostgres(t)
	if _, err := schemas.Migrate(testkit.Context(t), pg.URL); err != nil {
		t.Fatal(err)
	}
	createTopics(t, k, 1, "", topics.BronzeRecords, topics.BronzeDLQ, topics.ControlFlags)
	budgetOf := func(t *testing.T, args ...string) float64 {
		t.Helper()
		addr := testkit.ListenAddr(t)
		_, stop := startCLI(t, append([]string{"run", "silver", "--brokers", strings.Join(k.Brokers, ","), "--database-url", pg.URL,
			"--ops-addr", addr, "--log-level", "error"}, args...)...)
		defer func() {
			if err := stop(); err != nil {
				t.Errorf("run silver: %v", err)
			}
		}()
		var line string
		testkit.WaitFor(t, 30*time.Second, "sluice_memory_budget_bytes on /metrics", func() bool {
			resp, err := http.Get("http://" + addr + "/metrics")
			if err != nil {
				return false
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			for _, l := range strings.Split(string(b), "\n") {
				if v, ok := strings.CutPrefix(l, `sluice_memory_budget_bytes{pipeline="silver"} `); ok {
					line = v
					return true
				}
			}
			return false
		})
		v, err := strconv.ParseFloat(line, 64)
		if err != nil {
			t.Fatalf("sluice_memory_budget_bytes %q: %v", line, err)
		}
		return v
	}
	if got := budgetOf(t, "--memory-budget", "64Mi"); got != 64<<20 {
		t.Errorf("--memory-budget 64Mi: sluice_memory_budget_bytes %v, want %d", got, 64<<20)
	}
	t.Setenv("MEMORY_BUDGET", "200MB")
	if got := budgetOf(t); got != 200e6 {
		t.Errorf("MEMORY_BUDGET=200MB: sluice_memory_budget_bytes %v, want 2e8", got)
	}
}
