package main

import (
	"bytes"
	"context"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/pipelines/registry"
	"github.com/sluicehq/sluice/schemas"
	"github.com/sluicehq/sluice/topics"
)

// run on a cluster without the pipeline's topics (sluice topics ensure was
// forgotten) used to join its consumer group and wait silently for ever; it
// now fails at once naming the missing topics.
func TestRunMissingTopics(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.ForceFake()) // a private cluster: the catalog names are fixed
	pg := testkit.NewPostgres(t)
	start := time.Now()
	_, err := runCLI(t, "run", "silver", "--brokers", strings.Join(k.Brokers, ","), "--database-url", pg.URL, "--ops-addr", "")
	singleLine(t, err, "pipeline silver: topic(s) bronze.records, bronze.dlq, control.flags do not exist (run sluice topics ensure)")
	if d := time.Since(start); d > 15*time.Second {
		t.Fatalf("took %v to fail", d)
	}

	// With the topics in place the same command runs until it is stopped.
	ctx := testkit.Context(t)
	if _, err := schemas.Migrate(ctx, pg.URL); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{topics.BronzeRecords, topics.BronzeDLQ, topics.ControlFlags} {
		if _, err := k.Admin(t).CreateTopic(ctx, 1, -1, nil, name); err != nil {
			t.Fatal(err)
		}
	}
	root := newRootCmd()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs([]string{"run", "silver", "--brokers", strings.Join(k.Brokers, ","), "--database-url", pg.URL, "--ops-addr", "", "--log-level", "error"})
	rctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	start = time.Now()
	if err := execute(rctx, root); err != nil || time.Since(start) < 3*time.Second {
		t.Fatalf("run silver with its topics ended after %v: %v\n%s", time.Since(start), err, out.String())
	}
}

// startCLI runs the command of args in the background. It returns the
// command's output, safe to read while it runs, and stop, which cancels
// the command and returns its error once it returned (later calls return
// the same). When the test ends, stop is called and an error fails the
// test.
func startCLI(t *testing.T, args ...string) (out *testkit.Buffer, stop func() error) {
	t.Helper()
	root := newRootCmd()
	out = &testkit.Buffer{}
	root.SetOut(out)
	root.SetErr(out)
	root.SetArgs(args)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- execute(ctx, root) }()
	stop = sync.OnceValue(func() error {
		cancel()
		return <-done
	})
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("sluice %s: %v\n%s", strings.Join(args, " "), err, out.String())
		}
	})
	return out, stop
}

// createTopics creates prefix+name for each name with the given partition
// count, deleted when the test ends.
func createTopics(t *testing.T, k *testkit.Kafka, partitions int32, prefix string, names ...string) {
	t.Helper()
	adm := k.Admin(t)
	for _, name := range names {
		if _, err := adm.CreateTopic(testkit.Context(t), partitions, -1, nil, prefix+name); err != nil {
			t.Fatal(err)
		}
		k.WaitTopic(t, prefix+name, partitions)
		t.Cleanup(func() {
			cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if _, err := adm.DeleteTopic(cctx, prefix+name); err != nil {
				t.Logf("delete topic %s: %v", prefix+name, err)
			}
		})
	}
}

// sluice run used to read and write the catalog's topic names only: a copy
// run with --group-prefix on a shared cluster consumed the shared
// bronze.records and produced its dead letters and SCRAPE_SLOW into the
// shared bronze.dlq and control.flags, and the topics that sluice topics
// ensure --prefix creates could not be used. --topic-prefix names them.
func TestRunTopicPrefix(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t)
	pg := testkit.NewPostgres(t)
	ctx := testkit.Context(t)
	brokers := strings.Join(k.Brokers, ",")
	prefix := testkit.Name(t, "") + "."
	group := testkit.Name(t, "g") + "-"

	_, err := runCLI(t, "run", "silver", "--brokers", brokers, "--database-url", pg.URL, "--ops-addr", "", "--topic-prefix", prefix)
	singleLine(t, err, "topic(s) "+prefix+"bronze.records, "+prefix+"bronze.dlq, "+prefix+"control.flags do not exist (run sluice topics ensure --prefix "+prefix+")")

	if _, err := schemas.Migrate(ctx, pg.URL); err != nil {
		t.Fatal(err)
	}
	createTopics(t, k, 1, prefix, topics.BronzeRecords, topics.BronzeDLQ, topics.ControlFlags)
	cl := k.Client(t)
	good := `{"task_type":"ta.bar","payload":{"symbol":"VNM","trade_date":"2024-05-02","open":70.1,"high":71.5,"low":69.8,"close":71.2,"volume":1203400}}`
	bad := `{"task_type":"ta.bar","payload":{"symbol":"FPT","trade_date":"2024-05-02","open":100,"high":101,"low":99,"close":105,"volume":10}}`
	if err := cl.ProduceSync(ctx,
		&kgo.Record{Topic: prefix + topics.BronzeRecords, Key: []byte("VNM"), Value: []byte(good)},
		&kgo.Record{Topic: prefix + topics.BronzeRecords, Key: []byte("FPT"), Value: []byte(bad)},
	).FirstErr(); err != nil {
		t.Fatal(err)
	}

	out, _ := startCLI(t, "run", "silver", "--brokers", brokers, "--database-url", pg.URL, "--ops-addr", "", "--log-level", "error",
		"--topic-prefix", prefix, "--group-prefix", group)

	// The dead letter lands in the prefixed DLQ topic, naming the prefixed source.
	dl := k.Client(t, kgo.ConsumeTopics(prefix+topics.BronzeDLQ), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	fctx, fcancel := context.WithTimeout(ctx, time.Minute)
	defer fcancel()
	var rec *kgo.Record
	for rec == nil {
		fs := dl.PollFetches(fctx)
		if fctx.Err() != nil {
			t.Fatalf("no dead letter in %s: %v\n%s", prefix+topics.BronzeDLQ, fctx.Err(), out.String())
		}
		fs.EachRecord(func(r *kgo.Record) { rec = r })
	}
	hs := map[string]string{}
	for _, h := range rec.Headers {
		hs[h.Key] = string(h.Value)
	}
	if string(rec.Key) != "FPT" || hs["dlq.reason"] != "sanity_fail" || hs["dlq.rule"] != "ta.price_relation" || hs["dlq.source.topic"] != prefix+topics.BronzeRecords {
		t.Fatalf("dead letter key %q headers %v", rec.Key, hs)
	}

	// The valid record is a row, and SCRAPE_SLOW is in the prefixed flags topic.
	conn, err := pgx.Connect(ctx, pg.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM ta_silver WHERE symbol = 'VNM'").Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 1 || time.Now().After(deadline) {
			break
		}
	}
	if n != 1 {
		t.Fatalf("%d ta_silver rows of VNM, want 1\n%s", n, out.String())
	}
	fl := k.Client(t, kgo.ConsumeTopics(prefix+topics.ControlFlags), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	var flag string
	for flag == "" {
		fs := fl.PollFetches(fctx)
		if fctx.Err() != nil {
			t.Fatalf("nothing in %s: %v", prefix+topics.ControlFlags, fctx.Err())
		}
		fs.EachRecord(func(r *kgo.Record) { flag = string(r.Key) })
	}
	if flag != "SCRAPE_SLOW" {
		t.Fatalf("flag record key %q, want SCRAPE_SLOW", flag)
	}
}

// A backlog threshold of 0 or less used to be replaced by 10 000 silently
// (silver's default); it is now refused before connecting.
func TestRunBadBacklogThreshold(t *testing.T) {
	for _, v := range []string{"0", "-1"} {
		_, err := runCLI(t, "run", "silver", "--brokers", "127.0.0.1:1", "--backlog-threshold", v)
		singleLine(t, err, "invalid backlog threshold "+v+" (--backlog-threshold or BACKLOG_THRESHOLD; want ≥ 1)")
	}
	t.Setenv("BACKLOG_THRESHOLD", "0")
	_, err := runCLI(t, "run", "silver", "--brokers", "127.0.0.1:1")
	singleLine(t, err, "invalid backlog threshold 0 (--backlog-threshold or BACKLOG_THRESHOLD; want ≥ 1)")
	// Only silver uses it: other pipelines ignore it.
	_, err = runCLI(t, "run", "ticks", "--brokers", "127.0.0.1:1")
	singleLine(t, err, "kafka unreachable at 127.0.0.1:1")
}

// run's help lists every pipeline of the registry with its doc line, and
// an unknown name fails in one line naming the known ones, before
// anything connects.
func TestRunListsRegisteredPipelines(t *testing.T) {
	t.Parallel()
	specs := registry.All(registry.Settings{})
	out, err := runCLI(t, "run", "--help")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range specs {
		if !regexp.MustCompile(`(?m)^  ` + regexp.QuoteMeta(s.Name) + ` +` + regexp.QuoteMeta(s.Doc) + `$`).MatchString(out) {
			t.Errorf("run --help does not list %s with its doc:\n%s", s.Name, out)
		}
	}
	_, err = runCLI(t, "run", "silver", "bronze", "--brokers", "127.0.0.1:1")
	singleLine(t, err, `unknown pipeline "bronze" (known: modules, silver, smap, ticks, trades)`)
}

// Every pipeline checks the topics of its declaration, in catalog order,
// under --topic-prefix: ticks' tasks, job states and dead letters.
func TestRunMissingTopicsTicks(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.FakeOK())
	r := testkit.NewRedis(t, testkit.FakeOK())
	prefix := testkit.Name(t, "") + "."
	_, err := runCLI(t, "run", "ticks", "--brokers", strings.Join(k.Brokers, ","), "--redis-url", r.URL,
		"--s3-endpoint=", "--object-store-dir", t.TempDir(), "--ops-addr", "", "--topic-prefix", prefix)
	singleLine(t, err, "pipeline ticks: topic(s) "+prefix+topics.IngestTasks+", "+prefix+topics.IngestJobs+", "+prefix+topics.IngestDLQ+
		" do not exist (run sluice topics ensure --prefix "+prefix+")")
}

// An ops server other hosts can reach used to serve the write API (the
// ingest trigger) to anyone; without SLUICE_API_TOKEN it is now refused at
// start, in one line and before anything connects, unless
// --insecure-open-api asks for it. A certificate needs its key.
func TestRunOpsAddrNeedsToken(t *testing.T) {
	t.Setenv(apiTokenEnv, "")
	for _, addr := range []string{"0.0.0.0:9464", ":9464", "10.0.0.5:9464"} {
		// Refused before connecting: the broker is unreachable, and that
		// is not the error.
		_, err := runCLI(t, "run", "ticks", "--brokers", "127.0.0.1:1", "--ops-addr", addr)
		singleLine(t, err, "--ops-addr "+addr+" is reachable from other hosts and SLUICE_API_TOKEN is not set")
	}
	// Allowed: loopback, the open API asked for, a token set. They go on to
	// connect (and fail on the unreachable broker).
	_, err := runCLI(t, "run", "ticks", "--brokers", "127.0.0.1:1", "--ops-addr", "127.0.0.1:9464")
	singleLine(t, err, "kafka unreachable at 127.0.0.1:1")
	_, err = runCLI(t, "run", "ticks", "--brokers", "127.0.0.1:1", "--ops-addr", "0.0.0.0:9464", "--insecure-open-api")
	singleLine(t, err, "kafka unreachable at 127.0.0.1:1")
	_, err = runCLI(t, "run", "ticks", "--brokers", "127.0.0.1:1", "--ops-addr", "", "--insecure-open-api")
	singleLine(t, err, "kafka unreachable at 127.0.0.1:1")
	_, err = runCLI(t, "run", "ticks", "--brokers", "127.0.0.1:1", "--ops-addr", "0.0.0.0:9464", "--tls-cert", "c.pem")
	singleLine(t, err, "a certificate needs its key")
	t.Setenv(apiTokenEnv, "run-test-token-81d3e6")
	_, err = runCLI(t, "run", "ticks", "--brokers", "127.0.0.1:1", "--ops-addr", "0.0.0.0:9464")
	singleLine(t, err, "kafka unreachable at 127.0.0.1:1")
}

// sluice run serves the pipelines' write routes behind SLUICE_API_TOKEN
// and the --api-host names: the ticks trigger is refused without the
// token and to an unknown Host, and accepted with both.
func TestRunServesGuardedAPI(t *testing.T) {
	k := testkit.NewKafka(t, testkit.FakeOK())
	r := testkit.NewRedis(t, testkit.FakeOK())
	prefix := testkit.Name(t, "") + "."
	createTopics(t, k, 1, prefix, topics.IngestTasks, topics.IngestJobs, topics.IngestDLQ)
	addr := testkit.ListenAddr(t)
	const token = "run-test-token-0c7a51"
	t.Setenv(apiTokenEnv, token)
	t.Setenv("SLUICE_API_HOSTS", "sluice-ticks,sluice-ticks.sluice.svc")
	_, _ = startCLI(t, "run", "ticks", "--brokers", strings.Join(k.Brokers, ","), "--redis-url", r.URL,
		"--s3-endpoint=", "--object-store-dir", t.TempDir(), "--ops-addr", addr, "--log-level", "error",
		"--topic-prefix", prefix, "--group-prefix", testkit.Name(t, "g")+"-")
	testkit.WaitFor(t, 30*time.Second, "ops server up", func() bool {
		resp, err := http.Get("http://" + addr + "/healthz")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil && resp.StatusCode == 200
	})
	post := func(host, auth string) int {
		req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/api/v1/ingest/trigger",
			strings.NewReader(`{"symbol":"NQ","date":"2025-11-18","account_id":"U1"}`))
		req.Header.Set("Content-Type", "application/json")
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		if host != "" {
			req.Host = host
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := post("", ""); code != http.StatusUnauthorized {
		t.Errorf("trigger without the token: %d, want 401", code)
	}
	if code := post("evil.example", "Bearer "+token); code != http.StatusMisdirectedRequest {
		t.Errorf("trigger to a foreign Host: %d, want 421", code)
	}
	if code := post("sluice-ticks.sluice.svc:9464", "Bearer "+token); code != http.StatusAccepted {
		t.Errorf("trigger to an --api-host name with the token: %d, want 202", code)
	}
	recs := k.ReadTopic(t, prefix+topics.IngestTasks)
	if len(recs) != 1 || string(recs[0].Key) != "NQ:2025-11-18" {
		t.Fatalf("%d task records, want the one accepted trigger", len(recs))
	}

	// sluice ingest trigger --api sends SLUICE_API_TOKEN.
	if out, err := runCLI(t, "ingest", "trigger", "ES", "2025-11-18", "--api", "http://"+addr); err != nil || !strings.HasPrefix(out, "job ES:2025-11-18 instance ") {
		t.Fatalf("ingest trigger --api with the token: %v\n%s", err, out)
	}
	t.Setenv(apiTokenEnv, "not-the-token")
	_, err := runCLI(t, "ingest", "trigger", "GC", "2025-11-18", "--api", "http://"+addr)
	singleLine(t, err, "trigger: HTTP 401")
	if recs := k.ReadTopic(t, prefix+topics.IngestTasks); len(recs) != 2 || string(recs[1].Key) != "ES:2025-11-18" {
		t.Fatalf("%d task records, want the HTTP trigger and the CLI's", len(recs))
	}
}

// --instance-id (KAFKA_INSTANCE_ID) is checked before anything connects:
// Kafka allows letters, digits, '.', '_' and '-' in a group instance id
// (249 at most, and "-<group>" follows).
func TestRunInstanceIDChecked(t *testing.T) {
	for _, id := range []string{"pod 0", "pod/0", strings.Repeat("x", 201)} {
		_, err := runCLI(t, "run", "silver", "--brokers", "127.0.0.1:1", "--instance-id", id)
		singleLine(t, err, "invalid --instance-id")
	}
	_, err := runCLI(t, "run", "silver", "--brokers", "127.0.0.1:1", "--instance-id", "sluice-silver-0")
	singleLine(t, err, "kafka unreachable at 127.0.0.1:1")
	t.Setenv("KAFKA_INSTANCE_ID", "a:b")
	_, err = runCLI(t, "run", "silver", "--brokers", "127.0.0.1:1")
	singleLine(t, err, `invalid --instance-id "a:b" (KAFKA_INSTANCE_ID`)
}
