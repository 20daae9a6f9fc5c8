package console

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"

	"github.com/sluicehq/sluice/internal/groupctl"
	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/pipelines"
	"github.com/sluicehq/sluice/pipelines/ticks"
	"github.com/sluicehq/sluice/schemas"
	"github.com/sluicehq/sluice/stages/dlq"
)

// screenshotDirEnv names the directory the browser test saves its
// screenshots to (make console-screenshots sets docs/img); unset, they go
// to the test's temporary directory.
const screenshotDirEnv = "SLUICE_SCREENSHOT_DIR"

// chromium returns the path of a Chromium or Chrome binary. Without one
// the test is skipped with the reason, except under CI=true, where the
// stack scripts install Debian's chromium and a missing browser fails.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	msg := "no chromium, chromium-browser, google-chrome or headless-shell on PATH (Debian: apt-get install -y chromium; deploy/stack/up.sh installs it)"
	if os.Getenv("CI") == "true" {
		t.Fatal("CI=true: " + msg)
	}
	t.Skip(msg)
	return ""
}

// browser starts a headless Chromium and returns a tab context; JavaScript
// runs unless noJS.
func browser(t *testing.T, exe string, noJS bool) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(exe), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.WindowSize(1280, 900), chromedp.UserDataDir(t.TempDir()))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelAlloc)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(cancel)
	ctx, cancelT := context.WithTimeout(ctx, 3*time.Minute)
	t.Cleanup(cancelT)
	if noJS {
		if _, err := chromedp.Call(ctx, emulation.SetScriptExecutionDisabled, emulation.SetScriptExecutionDisabledParams{Value: true}); err != nil {
			t.Fatalf("disable JavaScript: %v", err)
		}
	}
	return ctx
}

// do runs the browser steps; what names them in a failure.
func do(t *testing.T, b context.Context, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(b, steps...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// text is the text of the first element sel (a CSS selector) matches,
// once it exists.
func text(t *testing.T, b context.Context, sel string) string {
	t.Helper()
	s, err := chromedp.Run(b, chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		t.Fatalf("text of %s: %v", sel, err)
	}
	return s
}

func screenshot(t *testing.T, b context.Context, name string) {
	t.Helper()
	dir := os.Getenv(screenshotDirEnv)
	if dir == "" {
		dir = t.TempDir()
	}
	png, err := chromedp.Run(b, chromedp.FullScreenshot(100)) // quality 100: PNG
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, png, 0o644); err != nil {
		t.Fatalf("save screenshot: %v", err)
	}
	t.Logf("screenshot %s", p)
}

// The console in a real browser: every page shows what the broker and
// PostgreSQL hold, a redrive through the UI delivers the selected record,
// and the pages read without JavaScript.
func TestConsoleInBrowser(t *testing.T) {
	exe := chromium(t)
	t.Parallel()
	f := newFixture(t)
	pg := testkit.NewPostgres(t)
	ctx := testkit.Context(t)
	if _, err := schemas.Migrate(ctx, pg.URL); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	if _, err := pg.Pool.Exec(ctx, `INSERT INTO control_flags (name, value, updated_at) VALUES ('SCRAPE_SLOW', true, now())`); err != nil {
		t.Fatal(err)
	}
	if _, err := pg.Pool.Exec(ctx, `INSERT INTO ticker_data_modules (ticker, module_id, status, fetched_at, expires_at, state_epoch, state_version, updated_at)
		VALUES ('AAPL', 'options_flow', 'ready', now(), now() + interval '1 hour', 1, 1, now())`); err != nil {
		t.Fatal(err)
	}
	c, err := New(Config{Kafka: f.k.Opts(t), Pipelines: []pipelines.Spec{f.spec}, Token: "browser-token", FlagsTopic: f.flags,
		JobsTopic: f.jobs, Postgres: pg.Pool, SampleEvery: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	srv := httptest.NewServer(c.Handler())
	t.Cleanup(srv.Close)
	sctx, stopSampling := context.WithCancel(ctx)
	sampled := make(chan struct{})
	go func() { c.Sample(sctx); close(sampled) }()
	t.Cleanup(func() { stopSampling(); <-sampled })

	b := browser(t, exe, false)

	// Overview: the group's lag as the broker reports it, the flag as the
	// topic and control_flags hold it, and the chart drawn by uPlot from
	// the console's samples (the embedded scripts run under the page's CSP).
	rep, err := groupctl.Lag(ctx, f.adm, f.group)
	if err != nil {
		t.Fatal(err)
	}
	gl, _ := rep.Group(f.group)
	group := "#group-" + f.group
	do(t, b, "overview", chromedp.Navigate(srv.URL+"/"), chromedp.WaitVisible(chromedp.CSS(group+" .uplot")))
	libs, err := chromedp.Run(b, chromedp.Evaluate[string](`typeof htmx + " " + typeof uPlot`))
	if err != nil || libs != "object function" {
		t.Errorf("embedded libraries in the page: %q, %v; want htmx and uPlot loaded", libs, err)
	}
	totalLag := text(t, b, group+" .total-lag")
	if totalLag != strconv.FormatInt(gl.Total, 10) {
		t.Errorf("overview total lag %q, the broker says %d", totalLag, gl.Total)
	}
	var dbVal bool
	if err := pg.Pool.QueryRow(ctx, `SELECT value FROM control_flags WHERE name = 'SCRAPE_SLOW'`).Scan(&dbVal); err != nil {
		t.Fatal(err)
	}
	flagRow := text(t, b, `tr.flag[data-flag="SCRAPE_SLOW"]`)
	if f := strings.Fields(flagRow); len(f) < 5 || f[0] != "SCRAPE_SLOW" || f[1] != "true" || f[2] != "12345" || !strings.Contains(flagRow, fmt.Sprintf("%v at ", dbVal)) {
		t.Errorf("flag row %q: want the topic's true/12345 and control_flags' %v", flagRow, dbVal)
	}
	screenshot(t, b, "console-overview.png")

	// Dead letters: the counts the DLQ holds; the <script> value as text.
	want := map[string]int{}
	if err := dlq.Inspect(ctx, f.k.Opts(t), f.dlqTopic, dlq.Filter{}, 0, func(r dlq.Record) error {
		want[r.Reason+"/"+r.Rule]++
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	do(t, b, "dead letters", chromedp.Navigate(srv.URL+"/dlq?topic="+f.dlqTopic), chromedp.WaitVisible(chromedp.CSS("#counts")))
	rows, err := chromedp.Run(b, chromedp.AttributesAll(chromedp.CSSAll("tr.count")))
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != len(want) {
		t.Errorf("%d count rows, the DLQ has %d reason/rule pairs %v", len(rows), len(want), want)
	}
	for _, row := range rows {
		k := row["data-reason"] + "/" + row["data-rule"]
		n := text(t, b, fmt.Sprintf(`tr.count[data-reason=%q][data-rule=%q] .n`, row["data-reason"], row["data-rule"]))
		if n != strconv.Itoa(want[k]) {
			t.Errorf("count %s = %s, the DLQ has %d", k, n, want[k])
		}
	}
	value := text(t, b, "#rec-1-0 pre.value")
	title, err := chromedp.Run(b, chromedp.Title())
	if err != nil {
		t.Fatal(err)
	}
	if value != scriptValue || strings.Contains(title, "pwned") {
		t.Errorf("the <script> value shows as %q (title %q): want it as text, not run", value, title)
	}
	screenshot(t, b, "console-dead-letters.png")

	// Redrive XSS (partition 1, offset 0) through the UI: preview, token,
	// confirm; the record arrives on its source partition.
	before := ends(t, f.adm, f.src)
	do(t, b, "preview", chromedp.Click(chromedp.CSS(`input[name="sel"][value="1:0"]`)), chromedp.Click(chromedp.CSS("#preview")),
		chromedp.WaitVisible(chromedp.CSS("#would-send")))
	wouldSend := text(t, b, "#would-send")
	f.unchanged(t, before, "the preview")
	do(t, b, "confirm", chromedp.SendKeys(chromedp.CSS("#token"), "browser-token"), chromedp.Click(chromedp.CSS("#confirm")),
		chromedp.WaitVisible(chromedp.CSS("#sent")))
	if sent := text(t, b, "#sent"); wouldSend != "1" || sent != "1" {
		t.Fatalf("preview would send %q, confirm sent %q; want 1 and 1", wouldSend, sent)
	}
	arrived := 0
	for _, r := range f.k.ReadTopic(t, f.src) {
		if r.Partition == 1 && string(r.Key) == "XSS" && string(r.Value) == scriptValue {
			arrived++
		}
	}
	if arrived != 1 {
		t.Fatalf("%d XSS records on %s[1] after the redrive, want 1", arrived, f.src)
	}

	// Jobs: the state the job topic holds.
	all, err := ticks.ReadJobs(ctx, f.k.Opts(t), f.jobs, nil)
	if err != nil {
		t.Fatal(err)
	}
	job := ticks.Flatten(all)["AAPL:2024-05-02"]
	do(t, b, "jobs", chromedp.Navigate(srv.URL+"/jobs"))
	status, segs := text(t, b, `tr.job[data-job="AAPL:2024-05-02"] .status`), text(t, b, `tr.job[data-job="AAPL:2024-05-02"] .segments`)
	if job == nil || status != string(job.Status) || segs != strconv.Itoa(job.Segments) {
		t.Fatalf("jobs page %s/%s segments, the topic holds %+v", status, segs, job)
	}
	if fr := text(t, b, `tr.ticker[data-ticker="AAPL"] td.fresh-fresh`); fr != "fresh" {
		t.Fatalf("modules matrix shows AAPL × options_flow as %q, the view says fresh", fr)
	}

	// Without JavaScript every page still reads (the redrive added a
	// record to the input: the broker's lag now).
	rep, err = groupctl.Lag(ctx, f.adm, f.group)
	if err != nil {
		t.Fatal(err)
	}
	gl, _ = rep.Group(f.group)
	nojs := browser(t, exe, true)
	do(t, nojs, "overview without JavaScript", chromedp.Navigate(srv.URL+"/"))
	lagNoJS := text(t, nojs, group+" .total-lag")
	do(t, nojs, "dead letters without JavaScript", chromedp.Navigate(srv.URL+"/dlq?topic="+f.dlqTopic))
	matching := text(t, nojs, "#matching")
	do(t, nojs, "jobs without JavaScript", chromedp.Navigate(srv.URL+"/jobs"))
	jobNoJS := text(t, nojs, `tr.job[data-job="AAPL:2024-05-02"] .status`)
	if lagNoJS != strconv.FormatInt(gl.Total, 10) || matching != "4" || jobNoJS != string(job.Status) {
		t.Fatalf("without JavaScript: lag %q (want %d), matching %q (want 4), job %q", lagNoJS, gl.Total, matching, jobNoJS)
	}
}
