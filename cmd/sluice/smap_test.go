package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/pipelines/smap"
	"github.com/sluicehq/sluice/schemas"
	"github.com/sluicehq/sluice/stages/progress"
	"github.com/sluicehq/sluice/topics"
)

func TestSmapProgressCommand(t *testing.T) {
	t.Parallel()
	r := testkit.NewRedis(t, testkit.WithRedisDB(1), testkit.FakeOK())
	prefix := r.Prefix + "smap:proj:"
	tr, err := smap.NewTracker(r.Client, smap.Config{KeyPrefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	ctx := testkit.Context(t)
	if _, err := tr.Init(ctx, "p1"); err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Discover(ctx, "p1", "a", "b", "c", "d"); err != nil {
		t.Fatal(err)
	}
	for _, it := range []string{"a", "b", "c"} {
		if _, err := tr.Count(ctx, "p1", it, it == "b"); err != nil {
			t.Fatal(err)
		}
	}
	out, err := runCLI(t, "smap", "progress", "p1", "--json", "--redis-url", r.URL, "--key-prefix", prefix)
	if err != nil {
		t.Fatalf("progress --json: %v\n%s", err, out)
	}
	var p smap.Progress
	if err := json.Unmarshal([]byte(out), &p); err != nil {
		t.Fatalf("output %q: %v", out, err)
	}
	if want := (smap.Progress{ProjectID: "p1", Status: "CRAWLING", Total: 4, Processed: 3, Errors: 1, Percent: 75}); p != want {
		t.Fatalf("progress %+v, want %+v", p, want)
	}
	if out, err := runCLI(t, "smap", "progress", "nope", "--json", "--redis-url", r.URL, "--key-prefix", prefix); err == nil || !strings.Contains(out, "NOT_FOUND") {
		t.Fatalf("unknown project: %v %q", err, out)
	}

	// Live bar: the project completes while the command watches.
	go func() {
		time.Sleep(300 * time.Millisecond)
		tr.Seal(context.Background(), "p1", 4)           //nolint:errcheck // checked through the output
		tr.Count(context.Background(), "p1", "d", false) //nolint:errcheck
		tr.MarkDone(context.Background(), "p1")          //nolint:errcheck
	}()
	out, err = runCLI(t, "smap", "progress", "p1", "--interval", "50ms", "--redis-url", r.URL, "--key-prefix", prefix)
	if err != nil {
		t.Fatalf("progress: %v\n%s", err, out)
	}
	// Not a terminal: plain lines, no "\r" redraws.
	if strings.ContainsAny(out, "\r\x1b") || !strings.Contains(out, " 75.0% 3/4") || !strings.Contains(out, "100.0% 4/4") ||
		!strings.Contains(out, "project p1 DONE: 4/4 processed, 1 errors (100.00%)") {
		t.Fatalf("progress output %q", out)
	}
}

func TestSmapRebuildProgressCommand(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.ForceFake()) // the rebuild publishes to the fixed topic smap.job.completed: keep it private
	r := testkit.NewRedis(t, testkit.WithRedisDB(1), testkit.FakeOK())
	pg := testkit.NewPostgres(t)
	ctx := testkit.Context(t)
	if _, err := schemas.Migrate(ctx, pg.URL); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	prefix := r.Prefix + "smap:proj:"
	// Three items analysed (one failed), a sealed total of three, never
	// completed: the rebuild must restore the counts and publish.
	for i, it := range []string{"i1", "i2", "i3"} {
		errType := any(nil)
		if i == 1 {
			errType = "decode_error"
		}
		if _, err := pg.Pool.Exec(ctx, `INSERT INTO post_analytics (project_id, item_id, error_type) VALUES ('p9', $1, $2)`, it, errType); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(dir, "projects"), 0o755); err != nil {
		t.Fatal(err)
	}
	meta := `{"project_id":"p9","total":3,"sealed_at":"2025-01-01T00:00:00Z"}`
	if err := os.WriteFile(filepath.Join(dir, "projects", "p9.json"), []byte(meta), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := k.Admin(t).CreateTopic(ctx, 1, -1, nil, topics.SmapJobCompleted); err != nil {
		t.Fatal(err)
	}
	out, err := runCLI(t, "smap", "rebuild-progress", "p9", "--brokers", strings.Join(k.Brokers, ","),
		"--database-url", pg.URL, "--redis-url", r.URL, "--s3-endpoint", "", "--object-store-dir", dir, "--key-prefix", prefix)
	if err != nil {
		t.Fatalf("rebuild-progress: %v\n%s", err, out)
	}
	if !strings.Contains(out, "project p9 rebuilt: DONE, 3/3 processed, 1 errors (100.00%), sealed=true") {
		t.Fatalf("output %q", out)
	}
	tr, err := smap.NewTracker(r.Client, smap.Config{KeyPrefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	st, err := tr.Get(ctx, "p9")
	if err != nil || st.Status != progress.StatusDone || st.Done != 3 || st.Errors != 1 {
		t.Fatalf("state %+v %v", st, err)
	}
	cl := k.Client(t, kgo.ConsumeTopics(topics.SmapJobCompleted), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	fs := cl.PollFetches(ctx)
	recs := fs.Records()
	if len(recs) != 1 || string(recs[0].Key) != "p9" {
		t.Fatalf("job.completed records %v, want one for p9", recs)
	}
	ev, err := smap.DecodeJobCompleted(recs[0].Value)
	if err != nil || ev.Payload.Done != 3 || ev.Payload.Errors != 1 || ev.EventID != "jc-p9" {
		t.Fatalf("job.completed %+v %v", ev, err)
	}
}

// Bad input to smap progress fails in one line and prints nothing: a zero
// or negative --interval used to panic (time.NewTicker), an empty ID and an
// unknown project used to be watched until Ctrl-C, and an unknown project
// printed an empty line (the end of a bar never drawn).
func TestSmapProgressBadInput(t *testing.T) {
	t.Parallel()
	r := testkit.NewRedis(t, testkit.WithRedisDB(1), testkit.FakeOK())
	prefix := r.Prefix + "smap:proj:"
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"p1", "--interval", "0"}, "invalid --interval 0s (want > 0)"},
		{[]string{"p1", "--interval", "-1s"}, "invalid --interval -1s (want > 0)"},
		{[]string{""}, "empty PROJECT_ID"},
		{[]string{" ", "--json"}, "empty PROJECT_ID"},
		{[]string{"nope", "--interval", "50ms"}, "project nope not found"},
	}
	for _, tc := range cases {
		start := time.Now()
		args := append([]string{"smap", "progress", "--redis-url", r.URL, "--key-prefix", prefix}, tc.args...)
		out, err := runCLI(t, args...)
		singleLine(t, err, tc.want)
		if out != "" {
			t.Errorf("%v printed %q, want nothing on stdout", tc.args, out)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("%v: took %v to fail", tc.args, d)
		}
	}

	// A project whose progress disappears while it is watched (expired,
	// flushed) ends the watch too.
	tr, err := smap.NewTracker(r.Client, smap.Config{KeyPrefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	ctx := testkit.Context(t)
	if _, err := tr.Init(ctx, "gone"); err != nil {
		t.Fatal(err)
	}
	go func() {
		time.Sleep(300 * time.Millisecond)
		r.Client.Del(context.Background(), prefix+"gone") //nolint:errcheck // checked through the command's error
	}()
	out, err := runCLI(t, "smap", "progress", "gone", "--interval", "50ms", "--redis-url", r.URL, "--key-prefix", prefix)
	singleLine(t, err, "project gone not found")
	if !strings.Contains(out, "INITIALIZING") {
		t.Fatalf("the bar never showed the project before it disappeared: %q", out)
	}
}

// A REDIS_URL that does not parse used to be quoted whole in the error,
// password included (url.Parse quotes its input); the error now shows the
// URL with the password replaced.
func TestRedisURLErrorHidesPassword(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.ForceFake())
	brokers := strings.Join(k.Brokers, ",")
	cases := []struct{ url, want string }{
		{"redis://u:pw-s3cret%zz@127.0.0.1:1/0", "invalid REDIS_URL redis://u:xxxxx@127.0.0.1:1/0: the user or password is not valid"},
		{"redis://:pw-s3cret@127.0.0.1:abc/0", `invalid REDIS_URL: parse "redis://:xxxxx@127.0.0.1:abc/0": invalid port ":abc" after host`},
		{"redis://:pw-s3cret@[::1/0", `invalid REDIS_URL: parse "redis://:xxxxx@[::1/0": missing ']' in host`},
		{"rediss://pw-s3cret@127.0.0.1:1/x", `invalid REDIS_URL: redis: invalid database number: "x"`},
	}
	for _, tc := range cases {
		for _, args := range [][]string{
			{"smap", "progress", "p1", "--json"},
			{"run", "ticks", "--brokers", brokers, "--ops-addr", ""},
		} {
			out, err := runCLI(t, append(args, "--redis-url", tc.url)...)
			singleLine(t, err, tc.want)
			if strings.Contains(err.Error()+out, "s3cret") {
				t.Errorf("%v with %s: the password leaked: %v\n%s", args, tc.url, err, out)
			}
		}
	}
}

// rebuild-progress of a project nothing knows of (a typo) used to report
// "rebuilt: INITIALIZING" and write that state to Redis, where a watcher
// would wait for it forever; it now fails and writes nothing.
func TestSmapRebuildProgressUnknownProject(t *testing.T) {
	t.Parallel()
	e := newRebuildEnv(t)
	r, pg, prefix, args := e.r, e.pg, e.prefix, e.args
	ctx := testkit.Context(t)
	out, err := runCLI(t, append([]string{"smap", "rebuild-progress", "ghost"}, args...)...)
	singleLine(t, err, "project ghost not found: no projects/ghost.json in the object store and no rows in post_analytics")
	if strings.Contains(out, "rebuilt") {
		t.Fatalf("output %q", out)
	}
	tr, err := smap.NewTracker(r.Client, smap.Config{KeyPrefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	if st, err := tr.Get(ctx, "ghost"); err != nil || st.Status != progress.StatusNotFound {
		t.Fatalf("state of ghost after the refused rebuild: %+v %v", st, err)
	}
	_, err = runCLI(t, append([]string{"smap", "rebuild-progress", ""}, args...)...)
	singleLine(t, err, "empty PROJECT_ID")

	// Rows in post_analytics alone are enough to rebuild from.
	if _, err := pg.Pool.Exec(ctx, `INSERT INTO post_analytics (project_id, item_id) VALUES ('p7', 'i1')`); err != nil {
		t.Fatal(err)
	}
	out, err = runCLI(t, append([]string{"smap", "rebuild-progress", "p7"}, args...)...)
	if err != nil || !strings.Contains(out, "project p7 rebuilt: ") || !strings.Contains(out, "1/1 processed") {
		t.Fatalf("rebuild of p7: %v\n%s", err, out)
	}
}

// rebuild-progress of a copy run with `sluice run smap --topic-prefix P`
// must publish the completion on P's job-completed topic: it used to
// publish on the fixed smap.job.completed, where no consumer of the copy
// reads it (or, on a shared cluster, where another deployment's do).
func TestSmapRebuildProgressJobCompletedTopic(t *testing.T) {
	t.Parallel()
	e := newRebuildEnv(t)
	k, pg, dir := e.k, e.pg, e.dir
	ctx := testkit.Context(t)
	if _, err := pg.Pool.Exec(ctx, `INSERT INTO post_analytics (project_id, item_id) VALUES ('p5', 'i1'), ('p5', 'i2')`); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "projects"), 0o755); err != nil {
		t.Fatal(err)
	}
	meta := `{"project_id":"p5","total":2,"sealed_at":"2025-01-01T00:00:00Z"}`
	if err := os.WriteFile(filepath.Join(dir, "projects", "p5.json"), []byte(meta), 0o644); err != nil {
		t.Fatal(err)
	}
	copyTopic := "copy1." + topics.SmapJobCompleted
	if _, err := k.Admin(t).CreateTopic(ctx, 1, -1, nil, copyTopic); err != nil {
		t.Fatal(err)
	}
	if _, err := k.Admin(t).CreateTopic(ctx, 1, -1, nil, topics.SmapJobCompleted); err != nil {
		t.Fatal(err)
	}
	out, err := runCLI(t, append([]string{"smap", "rebuild-progress", "p5", "--job-completed-topic", copyTopic}, e.args...)...)
	if err != nil {
		t.Fatalf("rebuild-progress: %v\n%s", err, out)
	}
	if !strings.Contains(out, "project p5 rebuilt: DONE, 2/2 processed, 0 errors (100.00%), sealed=true") {
		t.Fatalf("output %q", out)
	}
	recs := k.ReadTopic(t, copyTopic)
	if len(recs) != 1 || string(recs[0].Key) != "p5" {
		t.Fatalf("records on %s: %v, want one job.completed for p5", copyTopic, recs)
	}
	if recs := k.ReadTopic(t, topics.SmapJobCompleted); len(recs) != 0 {
		t.Fatalf("records on %s: %v, want none", topics.SmapJobCompleted, recs)
	}
}

// rebuildEnv is what the rebuild-progress tests run against: a fake Kafka,
// Redis DB 1, a migrated Postgres, an object-store directory, and the CLI
// flags that point sluice at them (smap keys under prefix).
type rebuildEnv struct {
	k      *testkit.Kafka
	r      *testkit.Redis
	pg     *testkit.Postgres
	dir    string
	prefix string
	args   []string
}

func newRebuildEnv(t *testing.T) rebuildEnv {
	t.Helper()
	e := rebuildEnv{
		k:   testkit.NewKafka(t, testkit.ForceFake()),
		r:   testkit.NewRedis(t, testkit.WithRedisDB(1), testkit.FakeOK()),
		pg:  testkit.NewPostgres(t),
		dir: t.TempDir(),
	}
	if _, err := schemas.Migrate(testkit.Context(t), e.pg.URL); err != nil {
		t.Fatal(err)
	}
	e.prefix = e.r.Prefix + "smap:proj:"
	e.args = []string{"--brokers", strings.Join(e.k.Brokers, ","), "--database-url", e.pg.URL, "--redis-url", e.r.URL,
		"--s3-endpoint", "", "--object-store-dir", e.dir, "--key-prefix", e.prefix}
	return e
}
