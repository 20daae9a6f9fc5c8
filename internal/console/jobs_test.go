package console

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/pipelines"
	"github.com/sluicehq/sluice/pipelines/trades"
	"github.com/sluicehq/sluice/schemas"
)

// The Jobs page shows the trades imports as the compacted import-state
// topic holds them (last record per import id) and the modules freshness
// matrix as ticker_modules_status derives it, everything escaped.
func TestJobsPageTradesAndModules(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	stateTopic := f.k.Topic(t, "trades.import.state", 1)
	now := time.Now().UTC().Truncate(time.Second)
	put := func(st trades.ImportState) {
		b, err := json.Marshal(st)
		if err != nil {
			t.Fatal(err)
		}
		f.produce(t, &kgo.Record{Topic: stateTopic, Key: []byte(st.ImportID), Value: b})
	}
	put(trades.ImportState{ImportID: "imp-1", UserID: "u1", Broker: "sim", Status: "running", Page: 1, Fetched: 10, Stored: 9, Rejected: 1, UpdatedAt: now.Add(-time.Minute)})
	put(trades.ImportState{ImportID: "imp-1", UserID: "u1", Broker: "sim", Status: "completed", Page: 3, Fetched: 30, Stored: 28, Rejected: 2, UpdatedAt: now})
	put(trades.ImportState{ImportID: "imp-2", UserID: "u2", Broker: "sim", Status: "failed", Page: 1, Error: "<script>alert(1)</script>", UpdatedAt: now.Add(-time.Hour)})

	pg := testkit.NewPostgres(t)
	ctx := testkit.Context(t)
	if _, err := schemas.Migrate(ctx, pg.URL); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	if _, err := pg.Pool.Exec(ctx, `INSERT INTO ticker_data_modules (ticker, module_id, status, fetched_at, expires_at, last_error, state_epoch, state_version, updated_at) SELECT *, 1, 1, now() FROM (VALUES
		('AAPL', 'options_flow', 'ready', now(), now() + interval '1 hour', NULL),
		('AAPL', 'dark_pool', 'ready', now() - interval '2 hours', now() + interval '1 day', NULL),
		('MSFT', 'options_flow', 'error', NULL, NULL, '<b>upstream</b>'),
		('MSFT', 'short_interest', 'ready', now() - interval '3 days', now() - interval '1 day', NULL)) AS v`); err != nil {
		t.Fatal(err)
	}
	// What the view says, to compare the page with.
	want := map[[2]string]string{}
	rows, err := pg.Pool.Query(ctx, `SELECT ticker::text, module_id, freshness_status FROM ticker_modules_status`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var tk, mod, fr string
		if err := rows.Scan(&tk, &mod, &fr); err != nil {
			t.Fatal(err)
		}
		want[[2]string{tk, mod}] = fr
	}
	rows.Close()
	if len(want) != 4 || want[[2]string{"AAPL", "dark_pool"}] != "stale" || want[[2]string{"MSFT", "short_interest"}] != "expired" {
		t.Fatalf("the view derives %v", want)
	}

	srv := serveConfig(t, Config{Kafka: f.k.Opts(t), Pipelines: []pipelines.Spec{f.spec}, JobsTopic: f.jobs, FlagsTopic: f.flags,
		TradesStateTopic: stateTopic, Postgres: pg.Pool})
	status, body := get(t, srv.URL+"/jobs")
	if status != 200 {
		t.Fatalf("GET /jobs = %d\n%s", status, body)
	}
	for _, s := range []string{
		`<tr class="import" data-import="imp-1"><td>imp-1</td><td>u1</td><td>sim</td><td class="status">completed</td><td class="pages">3</td><td class="fetched">30</td><td class="stored">28</td><td class="rejected">2</td>`,
		`<tr class="import" data-import="imp-2"><td>imp-2</td><td>u2</td><td>sim</td><td class="status">failed</td>`,
		`&lt;script&gt;alert(1)&lt;/script&gt;`,
		`<th>ticker</th><th>dark_pool</th><th>options_flow</th><th>short_interest</th>`,
		`error &lt;b&gt;upstream&lt;/b&gt;`,
	} {
		if !strings.Contains(body, s) {
			t.Errorf("jobs page lacks %s", s)
		}
	}
	if strings.Count(body, `class="import"`) != 2 || strings.Index(body, `data-import="imp-1"`) > strings.Index(body, `data-import="imp-2"`) {
		t.Errorf("want imp-1 (newest) then imp-2, once each")
	}
	if strings.Contains(body, "<script>alert") || strings.Contains(body, "<b>upstream") {
		t.Errorf("record content rendered as markup")
	}
	// Every cell of the matrix carries the view's freshness, in order.
	modules := []string{"dark_pool", "options_flow", "short_interest"}
	for _, tk := range []string{"AAPL", "MSFT"} {
		i := strings.Index(body, `<tr class="ticker" data-ticker="`+tk+`">`)
		if i < 0 {
			t.Fatalf("no row for %s", tk)
		}
		row := body[i : i+strings.Index(body[i:], "</tr>")]
		for _, mod := range modules {
			fr, ok := want[[2]string{tk, mod}]
			cell := `<td class="fresh-absent">-</td>`
			if ok {
				cell = `<td class="fresh-` + fr + `" title="`
			}
			if !strings.Contains(row, cell) {
				t.Errorf("%s × %s: row %s lacks %s", tk, mod, row, cell)
			}
			row = row[strings.Index(row, cell)+len(cell):]
		}
	}
}

// serveConfig starts a console on cfg, closed with the test.
func serveConfig(t *testing.T, cfg Config) *httptest.Server {
	t.Helper()
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	srv := httptest.NewServer(c.Handler())
	t.Cleanup(srv.Close)
	return srv
}
