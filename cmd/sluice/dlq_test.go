package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/schemas"
	"github.com/sluicehq/sluice/stages"
)

func dlqTestRecord(topic, key, value, reason, rule, src string, srcPartition string, failedAt time.Time) *kgo.Record {
	// Each key is its own source record (dead letters of one source
	// record are copies, which archive and redrive skip); FPT's is at 3.
	srcOffset := map[string]string{"VNM": "4", "HPG": "5", "BIG": "6"}[key]
	if srcOffset == "" {
		srcOffset = "3"
	}
	return &kgo.Record{Topic: topic, Key: []byte(key), Value: []byte(value), Headers: []kgo.RecordHeader{
		{Key: stages.HeaderReason, Value: []byte(reason)},
		{Key: stages.HeaderRule, Value: []byte(rule)},
		{Key: stages.HeaderError, Value: []byte("bad " + key)},
		{Key: stages.HeaderStage, Value: []byte("validate")},
		{Key: stages.HeaderSourceTopic, Value: []byte(src)},
		{Key: stages.HeaderSourcePartition, Value: []byte(srcPartition)},
		{Key: stages.HeaderSourceOffset, Value: []byte(srcOffset)},
		{Key: stages.HeaderAttempts, Value: []byte("1")},
		{Key: stages.HeaderFailedAt, Value: []byte(failedAt.Format(time.RFC3339))},
	}}
}

// dlqFixture writes three DLQ records to a fresh DLQ topic and returns the
// brokers, the DLQ topic and the (empty) source topic.
func dlqFixture(t *testing.T) (brokers, dlqTopic, src string) {
	t.Helper()
	brokers, cl, names := opsCluster(t, 1, "dlq", "src")
	dlqTopic, src = names[0], names[1]
	t0 := time.Date(2024, 5, 1, 9, 0, 0, 0, time.UTC)
	long := `{"text":"` + strings.Repeat("x", 300) + `"}`
	produceOps(t, cl,
		dlqTestRecord(dlqTopic, "FPT", `{"symbol":"fpt"}`, "sanity_fail", "ta.symbol", src, "0", t0),
		dlqTestRecord(dlqTopic, "VNM", long, "sanity_fail", "ta.price", src, "0", t0.Add(time.Hour)),
		dlqTestRecord(dlqTopic, "HPG", `not json`, "decode_error", "", src, "0", t0.Add(2*time.Hour)),
	)
	return brokers, dlqTopic, src
}

func TestDLQInspectCommand(t *testing.T) {
	t.Parallel()
	brokers, dlqTopic, src := dlqFixture(t)

	out, err := runCLI(t, "dlq", "inspect", "--brokers", brokers, "--topic", dlqTopic, "--reason", "sanity_fail")
	if err != nil {
		t.Fatalf("inspect: %v\n%s", err, out)
	}
	for _, want := range []string{
		dlqTopic + `[0]@0  2`, `key="FPT"`, "  dlq.reason: sanity_fail", "  dlq.rule: ta.symbol", "  dlq.error: bad FPT", "  dlq.stage: validate",
		"  dlq.source.topic: " + src, "  dlq.source.partition: 0", "  dlq.source.offset: 3", "  dlq.attempts: 1",
		"  dlq.failed_at: 2024-05-01T09:00:00Z", `  value: {"symbol":"fpt"}`, "… (311 bytes)", "2 record(s)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("inspect output lacks %q", want)
		}
	}
	if strings.Contains(out, "HPG") || strings.Contains(out, strings.Repeat("x", 250)) {
		t.Errorf("inspect printed a filtered record or an uncut value:\n%s", out)
	}

	out, err = runCLI(t, "dlq", "inspect", "--brokers", brokers, "--topic", dlqTopic, "--json", "--since", "2024-05-01T09:30:00Z")
	if err != nil {
		t.Fatalf("inspect --json: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 {
		t.Fatalf("inspect --json printed %d lines, want 2:\n%s", len(lines), out)
	}
	var recs []dlqJSON
	for _, l := range lines {
		var j dlqJSON
		if err := json.Unmarshal([]byte(l), &j); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		recs = append(recs, j)
	}
	if recs[0].Key != "VNM" || len(recs[0].Value) != 311 || recs[0].Rule != "ta.price" || len(recs[0].Headers) != 9 ||
		recs[1].Key != "HPG" || string(recs[1].Value) != `"not json"` || recs[1].Reason != "decode_error" {
		t.Fatalf("json records: %+v", recs)
	}

	out, err = runCLI(t, "dlq", "inspect", "--brokers", brokers, "--topic", dlqTopic, "--limit", "1")
	if err != nil || !strings.Contains(out, "1 record(s) (limit reached") {
		t.Fatalf("inspect --limit 1: %v\n%s", err, out)
	}
	missing := testkit.Name(t, "missing")
	_, err = runCLI(t, "dlq", "inspect", "--brokers", brokers, "--topic", missing)
	singleLine(t, err, fmt.Sprintf("topic %q does not exist", missing))
}

func TestDLQRedriveCommand(t *testing.T) {
	t.Parallel()
	brokers, dlqTopic, src := dlqFixture(t)
	srcEnd := func() int64 { return partitionZeroEnd(t, brokers, src) }

	out, err := runCLI(t, "dlq", "redrive", "--brokers", brokers, "--topic", dlqTopic, "--rule", "ta.symbol,ta.price", "--dry-run")
	if err != nil {
		t.Fatalf("redrive dry run: %v\n%s", err, out)
	}
	if !strings.Contains(out, "would send: 2\nskipped by filter: 1\n") || !hasRow(out, "send", dlqTopic+"[0]@0", `key="FPT"`) || srcEnd() != 0 {
		t.Fatalf("redrive dry run output (source end %d):\n%s", srcEnd(), out)
	}

	out, err = runCLI(t, "dlq", "redrive", "--brokers", brokers, "--topic", dlqTopic, "--reason", "decode_error")
	if err != nil {
		t.Fatalf("redrive: %v\n%s", err, out)
	}
	if !strings.Contains(out, "sent: 1\nskipped by filter: 2\nrefused by loop guard (redrive count ≥ 3): 0\n") || !strings.Contains(out, "--since 20") || srcEnd() != 1 {
		t.Fatalf("redrive output (source end %d):\n%s", srcEnd(), out)
	}
}

func TestDLQArchiveCommand(t *testing.T) {
	t.Parallel()
	brokers, dlqTopic, _ := dlqFixture(t)
	group := testkit.Name(t, "g")
	srv := testkit.NewPostgresServer(t)

	bare := srv.Postgres(t) // no migrations: the command says what to do
	_, err := runCLI(t, "dlq", "archive", "--once", "--brokers", brokers, "--topic", dlqTopic, "--database-url", bare.URL)
	singleLine(t, err, "run sluice migrate first")

	pg := srv.Postgres(t)
	if _, err := schemas.Migrate(context.Background(), pg.URL); err != nil {
		t.Fatal(err)
	}
	args := []string{"dlq", "archive", "--once", "--brokers", brokers, "--topic", dlqTopic, "--database-url", pg.URL}
	other := append(slices.Clone(args), "--group", testkit.Name(t, "other"))
	args = append(args, "--group", group)
	out, err := runCLI(t, args...)
	if err != nil || !strings.Contains(out, "archived 3 new record(s) of 3 read from "+dlqTopic) {
		t.Fatalf("archive: %v\n%s", err, out)
	}
	out, err = runCLI(t, other...)
	if err != nil || !strings.Contains(out, "archived 0 new record(s) of 3 read") {
		t.Fatalf("archive with another group: %v\n%s", err, out)
	}
	var n int
	if err := pg.Pool.QueryRow(context.Background(), `SELECT count(*) FROM dlq_archive WHERE dlq_topic = $1`, dlqTopic).Scan(&n); err != nil || n != 3 {
		t.Fatalf("%d rows (%v), want 3", n, err)
	}
}

// dlq archive without --once on a topic that does not exist (a typo) used to
// wait for records silently until interrupted; it now fails at once.
func TestDLQArchiveMissingTopic(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.FakeOK())
	pg := testkit.NewPostgres(t)
	if _, err := schemas.Migrate(context.Background(), pg.URL); err != nil {
		t.Fatal(err)
	}
	missing := testkit.Name(t, "missing")
	for _, once := range []bool{false, true} {
		args := []string{"dlq", "archive", "--brokers", strings.Join(k.Brokers, ","), "--database-url", pg.URL,
			"--topic", missing, "--group", testkit.Name(t, "g")}
		if once {
			args = append(args, "--once")
		}
		start := time.Now()
		_, err := runCLI(t, args...)
		singleLine(t, err, fmt.Sprintf("dlq archive: topic %q does not exist", missing))
		if d := time.Since(start); d > 12*time.Second {
			t.Fatalf("once=%v: took %v to fail", once, d)
		}
	}
	_, err := runCLI(t, "dlq", "archive", "--brokers", strings.Join(k.Brokers, ","), "--database-url", pg.URL, "--topic", "")
	singleLine(t, err, "empty --topic")
}

// A stub dead letter (dlq.value_omitted: the record was too large for the
// DLQ) is skipped by redrive, but the summary did not count it: it vanished
// from the report. It is now counted on its own line, and nothing is sent.
func TestDLQRedriveCountsOmittedStubs(t *testing.T) {
	t.Parallel()
	brokers, cl, names := opsCluster(t, 1, "dlq", "src")
	dlqTopic, src := names[0], names[1]
	t0 := time.Date(2024, 5, 1, 9, 0, 0, 0, time.UTC)
	stub := dlqTestRecord(dlqTopic, "BIG", "", "sink_rejected", "", src, "0", t0)
	stub.Value = nil
	stub.Headers = append(stub.Headers, kgo.RecordHeader{Key: stages.HeaderValueOmitted, Value: []byte("value of 2000000 bytes")})
	produceOps(t, cl, stub, dlqTestRecord(dlqTopic, "FPT", `{"symbol":"fpt"}`, "sanity_fail", "ta.symbol", src, "0", t0))

	for _, dry := range []bool{true, false} {
		args := []string{"dlq", "redrive", "--brokers", brokers, "--topic", dlqTopic, "--all"}
		verb := "sent: 1\n"
		if dry {
			args, verb = append(args, "--dry-run"), "would send: 1\n"
		}
		out, err := runCLI(t, args...)
		if err != nil {
			t.Fatalf("redrive (dry run %v): %v\n%s", dry, err, out)
		}
		if !strings.Contains(out, verb) || !strings.Contains(out, "not re-driven, value omitted (the original is only at its dlq.source.* coordinates): 1\n") {
			t.Fatalf("redrive (dry run %v) output:\n%s", dry, out)
		}
	}
	ends, err := kadm.NewClient(cl).ListEndOffsets(context.Background(), src)
	if err != nil {
		t.Fatal(err)
	}
	if o, _ := ends.Lookup(src, 0); o.Offset != 1 {
		t.Fatalf("source end offset %d, want 1 (only FPT re-driven)", o.Offset)
	}
}

// An empty --rule= selects the records without a rule (the flag parser
// would make it an empty list that selects every record); likewise
// --reason=.
func TestDLQEmptyRuleSelectsRecordsWithoutOne(t *testing.T) {
	t.Parallel()
	brokers, dlqTopic, _ := dlqFixture(t)
	out, err := runCLI(t, "dlq", "redrive", "--brokers", brokers, "--topic", dlqTopic, "--rule", "", "--dry-run")
	if err != nil {
		t.Fatalf("redrive dry run: %v\n%s", err, out)
	}
	if !strings.Contains(out, "would send: 1\nskipped by filter: 2\n") || !hasRow(out, "send", dlqTopic+"[0]@2", `key="HPG"`) {
		t.Fatalf("redrive --rule '' output:\n%s", out)
	}
	out, err = runCLI(t, "dlq", "inspect", "--brokers", brokers, "--topic", dlqTopic, "--reason=")
	if err != nil {
		t.Fatalf("inspect: %v\n%s", err, out)
	}
	if !strings.Contains(out, "0 record(s)") {
		t.Fatalf("inspect --reason= output:\n%s", out)
	}
}

// A broker that stops answering fetches before the scan reached the end of
// the DLQ makes inspect and redrive fail (exit non-zero) naming the
// partition left short, instead of printing a partial listing or "sent: 0"
// as a success. redrive still prints its counts and no --since hint.
func TestDLQCommandsFailWhenFetchesStall(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.ForceFake())
	dlqTopic, src := k.Topic(t, "dlq", 1), k.Topic(t, "src", 1)
	t0 := time.Date(2024, 5, 1, 9, 0, 0, 0, time.UTC)
	produceOps(t, k.Client(t), dlqTestRecord(dlqTopic, "FPT", `{"symbol":"fpt"}`, "sanity_fail", "ta.symbol", src, "0", t0))
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	k.Fake().ControlKey(int16(kmsg.Fetch), func(kmsg.Request) (kmsg.Response, error, bool) {
		k.Fake().KeepControl()
		k.Fake().SleepControl(func() { <-release })
		return nil, nil, false
	})
	brokers := strings.Join(k.Brokers, ",")
	short := dlqTopic + "[0] at offset 0 of 1"
	t.Run("inspect", func(t *testing.T) {
		t.Parallel()
		out, err := runCLI(t, "dlq", "inspect", "--brokers", brokers, "--topic", dlqTopic)
		if err == nil || !strings.Contains(err.Error(), short) || strings.Contains(out, "record(s)") {
			t.Fatalf("inspect with fetches stalled: err %v, output:\n%s", err, out)
		}
	})
	t.Run("redrive", func(t *testing.T) {
		t.Parallel()
		out, err := runCLI(t, "dlq", "redrive", "--brokers", brokers, "--topic", dlqTopic, "--all")
		if err == nil || !strings.Contains(err.Error(), short) || !strings.Contains(out, "sent: 0\n") || strings.Contains(out, "--since") {
			t.Fatalf("redrive with fetches stalled: err %v, output:\n%s", err, out)
		}
	})
}

// The --since hint of redrive is the start of the run to the second, the
// precision of dlq.failed_at: a record that fails again in the same second
// as the redrive started (its dlq.failed_at, written to the second, is then
// before the exact start) is still selected by that --since.
func TestDLQRedriveSinceHintKeepsRecordsOfTheSameSecond(t *testing.T) {
	t.Parallel()
	brokers, cl, names := opsCluster(t, 1, "dlq", "src")
	dlqTopic, src := names[0], names[1]
	t0 := time.Date(2024, 5, 1, 9, 0, 0, 0, time.UTC)
	produceOps(t, cl, dlqTestRecord(dlqTopic, "FPT", `{"symbol":"fpt"}`, "sanity_fail", "ta.symbol", src, "0", t0))
	before := time.Now()
	out, err := runCLI(t, "dlq", "redrive", "--brokers", brokers, "--topic", dlqTopic, "--all")
	if err != nil {
		t.Fatalf("redrive: %v\n%s", err, out)
	}
	_, hint, ok := strings.Cut(out, "add --since ")
	hint = strings.TrimSpace(hint)
	since, perr := time.Parse(time.RFC3339, hint)
	if !ok || perr != nil {
		t.Fatalf("no RFC 3339 --since hint (%v) in:\n%s", perr, out)
	}
	if since.Before(before.Truncate(time.Second)) || since.After(before.Add(time.Second)) {
		t.Fatalf("--since %s is not the start of the redrive (%s)", hint, before.UTC().Format(time.RFC3339Nano))
	}
	// The re-driven record fails again within the second the redrive
	// started: dlq.failed_at is that second, as every DLQ writer formats it.
	failedAt := since.UTC().Truncate(time.Second)
	produceOps(t, cl, dlqTestRecord(dlqTopic, "FPT", `{"symbol":"fpt"}`, "sanity_fail", "ta.symbol", src, "0", failedAt))
	out, err = runCLI(t, "dlq", "inspect", "--brokers", brokers, "--topic", dlqTopic, "--since", hint)
	if err != nil {
		t.Fatalf("inspect --since %s: %v\n%s", hint, err, out)
	}
	if !strings.Contains(out, "dlq.failed_at: "+failedAt.Format(time.RFC3339)) || !strings.Contains(out, "1 record(s)") {
		t.Fatalf("inspect --since %s does not show the record that failed at %s:\n%s", hint, failedAt.Format(time.RFC3339), out)
	}
}
