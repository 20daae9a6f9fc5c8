package dlq_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/stages"
	"github.com/sluicehq/sluice/stages/dlq"
)

var t0 = time.Date(2024, 5, 1, 9, 0, 0, 0, time.UTC)

// spec describes one DLQ record to write.
type spec struct {
	key, value   string
	partition    int32 // DLQ partition
	reason, rule string
	srcTopic     string // "" omits the source headers
	srcPartition int32
	srcOffset    int64
	failedAt     time.Time // zero omits dlq.failed_at
	redrives     int       // < 0 omits dlq.redrive_count
	extra        []kgo.RecordHeader
}

func (s spec) record(topic string) *kgo.Record {
	h := []kgo.RecordHeader{
		{Key: stages.HeaderReason, Value: []byte(s.reason)},
		{Key: stages.HeaderRule, Value: []byte(s.rule)},
		{Key: stages.HeaderError, Value: []byte("error of " + s.key)},
		{Key: stages.HeaderStage, Value: []byte("validate")},
		{Key: stages.HeaderAttempts, Value: []byte("1")},
	}
	if s.srcTopic != "" {
		h = append(h,
			kgo.RecordHeader{Key: stages.HeaderSourceTopic, Value: []byte(s.srcTopic)},
			kgo.RecordHeader{Key: stages.HeaderSourcePartition, Value: []byte(strconv.Itoa(int(s.srcPartition)))},
			kgo.RecordHeader{Key: stages.HeaderSourceOffset, Value: []byte(strconv.FormatInt(s.srcOffset, 10))})
	}
	if !s.failedAt.IsZero() {
		h = append(h, kgo.RecordHeader{Key: stages.HeaderFailedAt, Value: []byte(s.failedAt.Format(time.RFC3339))})
	}
	if s.redrives >= 0 {
		h = append(h, kgo.RecordHeader{Key: stages.HeaderRedriveCount, Value: []byte(strconv.Itoa(s.redrives))})
	}
	h = append(h, s.extra...)
	return &kgo.Record{Topic: topic, Partition: s.partition, Key: []byte(s.key), Value: []byte(s.value), Headers: h}
}

type env struct {
	k             *testkit.Kafka
	opts          []kgo.Opt
	cl            *kgo.Client // produces to explicit partitions
	dlqTopic, src string
}

// newEnv hands the test a Kafka cluster (KAFKA_BROKERS when set, else
// kfake) with a fresh 2-partition DLQ topic and 3-partition source topic.
func newEnv(t *testing.T) env {
	t.Helper()
	k := testkit.NewKafka(t, testkit.FakeOK())
	return env{
		k:        k,
		opts:     k.Opts(t),
		cl:       k.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner())),
		dlqTopic: k.Topic(t, "dlq", 2),
		src:      k.Topic(t, "src", 3),
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func (e env) write(t *testing.T, topic string, specs ...spec) {
	t.Helper()
	for _, s := range specs {
		// A broker may not know a just recreated topic's new id yet: such
		// a produce appended nothing and is tried again.
		deadline := time.Now().Add(30 * time.Second)
		for {
			err := e.cl.ProduceSync(ctxT(t), s.record(topic)).FirstErr()
			if err == nil {
				break
			}
			if !errors.Is(err, kerr.UnknownTopicID) || time.Now().After(deadline) {
				t.Fatal(err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// fixture is the DLQ content most tests use.
func fixture(src string) []spec {
	return []spec{
		{key: "FPT", value: `{"task_type":"ta.bar"}`, partition: 0, reason: "sanity_fail", rule: "ta.symbol", srcTopic: src, srcPartition: 1, srcOffset: 5, failedAt: t0, redrives: -1,
			extra: []kgo.RecordHeader{{Key: "trace", Value: []byte("abc")}}},
		{key: "VNM", value: `not json`, partition: 1, reason: "decode_error", srcTopic: src, srcPartition: 0, srcOffset: 7, failedAt: t0.Add(time.Hour), redrives: -1},
		{key: "HPG", value: `{"x":1}`, partition: 0, reason: "sanity_fail", rule: "ta.price", srcTopic: src, srcPartition: 2, srcOffset: 9, failedAt: t0.Add(2 * time.Hour), redrives: 3},
		{key: "MWG", value: `{"x":2}`, partition: 1, reason: "sanity_fail", rule: "ta.price", failedAt: t0.Add(3 * time.Hour), redrives: 0},
		{key: "SSI", value: `{"x":3}`, partition: 1, reason: "sanity_fail", rule: "ta.volume", srcTopic: src, srcPartition: 2, srcOffset: 11, failedAt: t0.Add(4 * time.Hour), redrives: 2},
	}
}

func TestParse(t *testing.T) {
	t.Parallel()
	full := spec{key: "FPT", value: `{}`, partition: 1, reason: "sanity_fail", rule: "ta.symbol", srcTopic: "bronze.records", srcPartition: 4, srcOffset: 42, failedAt: t0, redrives: 2}.record("bronze.dlq")
	full.Offset, full.Timestamp = 17, t0.Add(time.Minute)
	cases := []struct {
		name    string
		rec     *kgo.Record
		want    dlq.Record
		wantErr string
	}{
		{"all headers", full, dlq.Record{Topic: "bronze.dlq", Partition: 1, Offset: 17, Timestamp: t0.Add(time.Minute), Key: []byte("FPT"), Value: []byte(`{}`),
			Reason: "sanity_fail", Rule: "ta.symbol", Error: "error of FPT", Stage: "validate", SourceTopic: "bronze.records", SourcePartition: 4, SourceOffset: 42,
			Attempts: 1, FailedAt: t0, RedriveCount: 2}, ""},
		{"no headers", &kgo.Record{Topic: "d", Key: []byte("k"), Value: []byte("v")}, dlq.Record{Topic: "d", Key: []byte("k"), Value: []byte("v"), SourcePartition: -1, SourceOffset: -1}, ""},
		{"malformed headers", &kgo.Record{Topic: "d", Headers: []kgo.RecordHeader{
			{Key: stages.HeaderReason, Value: []byte("exception")},
			{Key: stages.HeaderSourcePartition, Value: []byte("x")},
			{Key: stages.HeaderFailedAt, Value: []byte("yesterday")},
			{Key: stages.HeaderRedriveCount, Value: []byte("-2")},
		}}, dlq.Record{Topic: "d", Reason: "exception", SourcePartition: -1, SourceOffset: -1}, "dlq.source.partition"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := dlq.Parse(tc.rec)
			if tc.wantErr == "" && err != nil {
				t.Fatalf("err = %v", err)
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), "dlq.failed_at") || !strings.Contains(err.Error(), "dlq.redrive_count") {
					t.Fatalf("err = %v, want one naming every malformed header", err)
				}
			}
			if len(got.Headers) != len(tc.rec.Headers) {
				t.Fatalf("headers %v, want all %d", got.Headers, len(tc.rec.Headers))
			}
			got.Headers = nil
			if fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", tc.want) {
				t.Fatalf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestFilterMatch(t *testing.T) {
	t.Parallel()
	r := dlq.Record{Reason: "sanity_fail", Rule: "ta.price", SourceTopic: "bronze.records", FailedAt: t0}
	noFailedAt := dlq.Record{Reason: "decode_error", Timestamp: t0}
	atP2O7 := dlq.Record{Partition: 2, Offset: 7}
	cases := []struct {
		name string
		f    dlq.Filter
		r    dlq.Record
		want bool
	}{
		{"zero filter", dlq.Filter{}, r, true},
		{"reason in list", dlq.Filter{Reasons: []string{"decode_error", "sanity_fail"}}, r, true},
		{"reason not in list", dlq.Filter{Reasons: []string{"decode_error"}}, r, false},
		{"rule", dlq.Filter{Rules: []string{"ta.price"}}, r, true},
		{"other rule", dlq.Filter{Rules: []string{"ta.volume"}}, r, false},
		{"since inclusive", dlq.Filter{Since: t0}, r, true},
		{"since after", dlq.Filter{Since: t0.Add(time.Nanosecond)}, r, false},
		{"until exclusive", dlq.Filter{Until: t0}, r, false},
		{"until after", dlq.Filter{Until: t0.Add(time.Second)}, r, true},
		{"source topic", dlq.Filter{SourceTopic: "bronze.records"}, r, true},
		{"other source topic", dlq.Filter{SourceTopic: "ingest.tasks"}, r, false},
		{"all criteria", dlq.Filter{Reasons: []string{"sanity_fail"}, Rules: []string{"ta.price"}, Since: t0.Add(-time.Hour), Until: t0.Add(time.Hour), SourceTopic: "bronze.records"}, r, true},
		{"one criterion fails", dlq.Filter{Reasons: []string{"sanity_fail"}, Rules: []string{"ta.symbol"}, Since: t0.Add(-time.Hour)}, r, false},
		{"time falls back to timestamp", dlq.Filter{Since: t0.Add(-time.Second), Until: t0.Add(time.Second)}, noFailedAt, true},
		{"time falls back to timestamp, outside", dlq.Filter{Since: t0.Add(time.Second)}, noFailedAt, false},
		{"at its position", dlq.Filter{At: []dlq.Position{{Partition: 0, Offset: 9}, {Partition: 2, Offset: 7}}}, atP2O7, true},
		{"same offset, other partition", dlq.Filter{At: []dlq.Position{{Partition: 0, Offset: 7}}}, atP2O7, false},
	}
	for _, tc := range cases {
		if got := tc.f.Match(tc.r); got != tc.want {
			t.Errorf("%s: Match = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestInspect(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	dlqTopic, src := e.dlqTopic, e.src
	e.write(t, dlqTopic, fixture(src)...)

	keys := func(f dlq.Filter, limit int) []string {
		var out []string
		err := dlq.Inspect(ctxT(t), e.opts, dlqTopic, f, limit, func(r dlq.Record) error {
			out = append(out, string(r.Key))
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(out)
		return out
	}
	cases := []struct {
		name  string
		f     dlq.Filter
		limit int
		want  []string
	}{
		{"all", dlq.Filter{}, 0, []string{"FPT", "HPG", "MWG", "SSI", "VNM"}},
		{"reason", dlq.Filter{Reasons: []string{"decode_error"}}, 0, []string{"VNM"}},
		{"rule", dlq.Filter{Rules: []string{"ta.price"}}, 0, []string{"HPG", "MWG"}},
		{"time window", dlq.Filter{Since: t0.Add(time.Hour), Until: t0.Add(3 * time.Hour)}, 0, []string{"HPG", "VNM"}},
		{"reason and since", dlq.Filter{Reasons: []string{"sanity_fail"}, Since: t0.Add(2 * time.Hour)}, 0, []string{"HPG", "MWG", "SSI"}},
		{"source topic", dlq.Filter{SourceTopic: src}, 0, []string{"FPT", "HPG", "SSI", "VNM"}},
		{"limit", dlq.Filter{Reasons: []string{"sanity_fail"}}, 2, nil}, // checked by count below
	}
	for _, tc := range cases {
		got := keys(tc.f, tc.limit)
		if tc.limit > 0 {
			if len(got) != tc.limit {
				t.Errorf("%s: got %v, want %d records", tc.name, got, tc.limit)
			}
			continue
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}

	// Every header is shown, typed and raw.
	var fpt dlq.Record
	err := dlq.Inspect(ctxT(t), e.opts, dlqTopic, dlq.Filter{Rules: []string{"ta.symbol"}}, 0, func(r dlq.Record) error { fpt = r; return nil })
	if err != nil {
		t.Fatal(err)
	}
	if fpt.Reason != "sanity_fail" || fpt.Rule != "ta.symbol" || fpt.Error != "error of FPT" || fpt.Stage != "validate" || fpt.SourceTopic != src ||
		fpt.SourcePartition != 1 || fpt.SourceOffset != 5 || fpt.Attempts != 1 || !fpt.FailedAt.Equal(t0) || fpt.Topic != dlqTopic || fpt.Partition != 0 || fpt.Offset != 0 ||
		string(fpt.Value) != `{"task_type":"ta.bar"}` {
		t.Fatalf("record = %+v", fpt)
	}
	var names []string
	for _, h := range fpt.Headers {
		names = append(names, h.Key)
	}
	wantNames := []string{stages.HeaderReason, stages.HeaderRule, stages.HeaderError, stages.HeaderStage, stages.HeaderAttempts,
		stages.HeaderSourceTopic, stages.HeaderSourcePartition, stages.HeaderSourceOffset, stages.HeaderFailedAt, "trace"}
	if !slices.Equal(names, wantNames) {
		t.Fatalf("headers %v, want %v", names, wantNames)
	}
	if v, _ := fpt.Header("trace"); v != "abc" {
		t.Fatalf("trace header = %q", v)
	}

	// An error from fn stops the scan and is returned.
	calls := 0
	err = dlq.Inspect(ctxT(t), e.opts, dlqTopic, dlq.Filter{}, 0, func(dlq.Record) error { calls++; return fmt.Errorf("boom") })
	if err == nil || !strings.Contains(err.Error(), "boom") || calls != 1 {
		t.Fatalf("err = %v after %d calls, want boom after 1", err, calls)
	}
	// A missing topic is an error, not a hang.
	if err := dlq.Inspect(ctxT(t), e.opts, testkit.Name(t, "missing"), dlq.Filter{}, 0, func(dlq.Record) error { return nil }); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("missing topic: err = %v", err)
	}
}

func TestInspectEmptyTopicReturns(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	n := 0
	if err := dlq.Inspect(ctxT(t), e.opts, e.dlqTopic, dlq.Filter{}, 0, func(dlq.Record) error { n++; return nil }); err != nil || n != 0 {
		t.Fatalf("err %v, %d records", err, n)
	}
}

func TestRedrive(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	dlqTopic, src := e.dlqTopic, e.src
	e.write(t, dlqTopic, fixture(src)...)
	req := dlq.RedriveRequest{DLQTopic: dlqTopic, Filter: dlq.Filter{Reasons: []string{"sanity_fail"}}, DryRun: true}
	decisions := map[string]dlq.Decision{}
	req.Each = func(r dlq.Record, d dlq.Decision) { decisions[string(r.Key)] = d }

	// Dry run: decides, sends nothing.
	res, err := dlq.Redrive(ctxT(t), e.opts, req)
	if err != nil {
		t.Fatal(err)
	}
	wantRes := dlq.RedriveResult{Scanned: 5, Sent: 2, Filtered: 1, Refused: 1, Unroutable: 1}
	res.StartedAt = time.Time{}
	if res != wantRes {
		t.Fatalf("dry run result %+v, want %+v", res, wantRes)
	}
	wantDecisions := map[string]dlq.Decision{"FPT": dlq.Send, "HPG": dlq.Refuse, "MWG": dlq.Unroutable, "SSI": dlq.Send}
	if fmt.Sprint(decisions) != fmt.Sprint(wantDecisions) {
		t.Fatalf("decisions %v, want %v", decisions, wantDecisions)
	}
	if got := e.k.ReadTopic(t, src); len(got) != 0 {
		t.Fatalf("dry run produced %d records", len(got))
	}

	// Real run: exactly the sendable filtered records reach the source topic.
	req.DryRun, req.Each = false, nil
	before := time.Now().UTC()
	res, err = dlq.Redrive(ctxT(t), e.opts, req)
	if err != nil {
		t.Fatal(err)
	}
	if res.StartedAt.Before(before.Add(-time.Second)) || res.StartedAt.After(time.Now()) {
		t.Fatalf("StartedAt %v not the start of the run", res.StartedAt)
	}
	// A record that failed again in the second the redrive started has a
	// dlq.failed_at of that second (written to the second): StartedAt as
	// Filter.Since selects it.
	again, _ := dlq.Parse(spec{key: "FPT", reason: "sanity_fail", failedAt: res.StartedAt.Truncate(time.Second), redrives: 1}.record(dlqTopic))
	if !(dlq.Filter{Since: res.StartedAt}).Match(again) {
		t.Fatalf("StartedAt %s as Since excludes a record that failed at %s, in the same second", res.StartedAt.Format(time.RFC3339Nano), again.FailedAt.Format(time.RFC3339))
	}
	res.StartedAt = time.Time{}
	if res != wantRes {
		t.Fatalf("result %+v, want %+v", res, wantRes)
	}
	got := e.k.ReadTopic(t, src)
	if len(got) != 2 {
		t.Fatalf("source topic has %d records, want 2", len(got))
	}
	byKey := map[string]*kgo.Record{}
	for _, r := range got {
		byKey[string(r.Key)] = r
	}
	check := func(key, value string, partition int32, redrives string, extra map[string]string) {
		t.Helper()
		r := byKey[key]
		if r == nil {
			t.Fatalf("record %s not re-driven; got %v", key, byKey)
		}
		if string(r.Value) != value || r.Partition != partition {
			t.Fatalf("%s: value %q partition %d, want %q %d", key, r.Value, r.Partition, value, partition)
		}
		hs := testkit.Headers(r)
		want := map[string]string{stages.HeaderRedriveCount: redrives}
		for k, v := range extra {
			want[k] = v
		}
		if fmt.Sprint(hs) != fmt.Sprint(want) {
			t.Fatalf("%s: headers %v, want %v", key, hs, want)
		}
	}
	check("FPT", `{"task_type":"ta.bar"}`, 1, "1", map[string]string{"trace": "abc", stages.HeaderOrigin: src + "/1/5"})
	check("SSI", `{"x":3}`, 2, "3", map[string]string{stages.HeaderOrigin: src + "/2/11"})

	// A missing DLQ topic is an error.
	if _, err := dlq.Redrive(ctxT(t), e.opts, dlq.RedriveRequest{DLQTopic: testkit.Name(t, "missing")}); err == nil {
		t.Fatal("redrive of a missing topic succeeded")
	}
}

func TestRedriveLimit(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	dlqTopic, src := e.dlqTopic, e.src
	e.write(t, dlqTopic,
		spec{key: "a", value: "1", reason: "exception", srcTopic: src, failedAt: t0, redrives: 0},
		spec{key: "b", value: "2", reason: "exception", srcTopic: src, failedAt: t0, redrives: 1},
		spec{key: "c", value: "3", reason: "exception", srcTopic: src, failedAt: t0, redrives: -1, extra: []kgo.RecordHeader{{Key: stages.HeaderRedriveCount, Value: []byte("many")}}},
	)
	res, err := dlq.Redrive(ctxT(t), e.opts, dlq.RedriveRequest{DLQTopic: dlqTopic, MaxRedrives: 1})
	if err != nil {
		t.Fatal(err)
	}
	if res.Sent != 1 || res.Refused != 2 {
		t.Fatalf("result %+v, want 1 sent (a) and 2 refused (b at the limit, c unreadable)", res)
	}
	got := e.k.ReadTopic(t, src)
	if len(got) != 1 || string(got[0].Key) != "a" {
		t.Fatalf("source got %d records, want only a", len(got))
	}
}

// A DLQ written in transactions ends in commit markers and may hold aborted
// records: Inspect shows only committed records and still ends at once.
func TestInspectTransactionalDLQ(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t)
	writeTransactional(t, e)

	start := time.Now()
	var keys []string
	if err := dlq.Inspect(ctx, e.opts, e.dlqTopic, dlq.Filter{}, 0, func(r dlq.Record) error {
		keys = append(keys, string(r.Key))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(keys, []string{"a", "b", "c"}) {
		t.Fatalf("keys %v, want a b c", keys)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Inspect took %v: it waited for records past the commit markers", d)
	}
}

// The stub of a record that was too large for the DLQ (dlq.value_omitted)
// is not re-driven: it holds no value, so re-sending it would publish an
// empty record to the source topic.
func TestRedriveSkipsStubs(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	dlqTopic, src := e.dlqTopic, e.src
	e.write(t, dlqTopic,
		spec{key: "a", value: "1", reason: "sanity_fail", srcTopic: src, failedAt: t0},
		spec{key: "b", value: "", reason: "sanity_fail", srcTopic: src, failedAt: t0,
			extra: []kgo.RecordHeader{{Key: stages.HeaderValueOmitted, Value: []byte("value of 2000000 bytes")}}},
	)
	var stub dlq.Record
	res, err := dlq.Redrive(ctxT(t), e.opts, dlq.RedriveRequest{DLQTopic: dlqTopic, Each: func(r dlq.Record, d dlq.Decision) {
		if d == dlq.Omitted {
			stub = r
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Sent != 1 || res.Omitted != 1 {
		t.Fatalf("result %+v, want 1 sent (a) and 1 omitted (b)", res)
	}
	if string(stub.Key) != "b" || stub.ValueOmitted != "value of 2000000 bytes" {
		t.Fatalf("omitted record %+v, want b with its dlq.value_omitted", stub)
	}
	if got := e.k.ReadTopic(t, src); len(got) != 1 || string(got[0].Key) != "a" {
		t.Fatalf("source got %d records, want only a", len(got))
	}
}

// A produce failure stops Redrive with an error, but every record the
// broker acknowledged in the same batch is counted as sent (a rerun sends
// them again: the count must say so). The failing record fails at once in
// the client (larger than the producer's batch limit), so its result comes
// first.
func TestRedriveCountsSentAfterAFailure(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	dlqTopic, src := e.dlqTopic, e.src
	e.write(t, dlqTopic,
		spec{key: "big", value: strings.Repeat("x", 4000), reason: "exception", srcTopic: src, srcOffset: 1, failedAt: t0, redrives: -1},
		spec{key: "good", value: "2", reason: "exception", srcTopic: src, srcOffset: 2, failedAt: t0, redrives: -1},
	)
	opts := append(e.opts[:len(e.opts):len(e.opts)], kgo.ProducerBatchMaxBytes(2000))
	res, err := dlq.Redrive(ctxT(t), opts, dlq.RedriveRequest{DLQTopic: dlqTopic})
	if err == nil {
		t.Fatal("redrive of a record larger than the producer's limit succeeded")
	}
	if got := e.k.ReadTopic(t, src); len(got) != 1 || string(got[0].Key) != "good" {
		t.Fatalf("source got %d records, want good", len(got))
	}
	if res.Sent != 1 {
		t.Fatalf("Sent = %d after a failed batch that delivered 1 record, want 1 (err %v)", res.Sent, err)
	}
}

// writeTransactional writes DLQ records with keys a and b in a committed
// transaction, "aborted" in an aborted one and c in a committed one, all to
// partition 0 of e's DLQ topic, and waits for the markers to be written.
func writeTransactional(t *testing.T, e env) {
	t.Helper()
	txn := e.k.Client(t, kgo.TransactionalID(testkit.Name(t, "txn")), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	ctx := ctxT(t)
	write := func(commit bool, keys ...string) {
		t.Helper()
		if err := txn.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			r := spec{key: k, value: "{}", reason: "exception", failedAt: t0, redrives: -1}.record(e.dlqTopic)
			if err := txn.ProduceSync(ctx, r).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
		if err := txn.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
			t.Fatal(err)
		}
	}
	write(true, "a", "b")
	write(false, "aborted")
	write(true, "c")
	// EndTransaction returns once the coordinator decided; the markers
	// reach the partitions a moment later, and until then "c" is past the
	// last stable offset, so not part of a scan starting now.
	adm := e.k.Admin(t)
	testkit.WaitFor(t, 30*time.Second, "the commit markers written", func() bool {
		lso, err1 := adm.ListCommittedOffsets(ctx, e.dlqTopic)
		hwm, err2 := adm.ListEndOffsets(ctx, e.dlqTopic)
		if err1 != nil || err2 != nil || lso.Error() != nil || hwm.Error() != nil {
			return false
		}
		same := true
		hwm.Each(func(o kadm.ListedOffset) {
			l, ok := lso.Lookup(o.Topic, o.Partition)
			same = same && ok && l.Offset == o.Offset
		})
		return same
	})
}

// A redrive run sends one record per source record and redrive count:
// further dead letters of it (copies at other DLQ offsets) are skipped as
// duplicates, with and without DryRun; dead letters without source
// coordinates are never duplicates.
func TestRedriveSendsASourceRecordOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	dlqTopic, src := e.dlqTopic, e.src
	e.write(t, dlqTopic,
		spec{key: "FPT", value: "1", partition: 0, reason: "sanity_fail", srcTopic: src, srcPartition: 1, srcOffset: 5, failedAt: t0, redrives: -1},
		spec{key: "FPT", value: "1", partition: 1, reason: "sanity_fail", srcTopic: src, srcPartition: 1, srcOffset: 5, failedAt: t0, redrives: 0},
		spec{key: "FPT", value: "1", partition: 1, reason: "sanity_fail", srcTopic: src, srcPartition: 1, srcOffset: 5, failedAt: t0, redrives: 1},
		spec{key: "SSI", value: "2", partition: 0, reason: "sanity_fail", srcTopic: src, srcPartition: 2, srcOffset: 9, failedAt: t0, redrives: -1},
		spec{key: "SSI", value: "2", partition: 0, reason: "sanity_fail", srcTopic: src, srcPartition: 2, srcOffset: 9, failedAt: t0, redrives: -1},
	)
	for _, dry := range []bool{true, false} {
		var dups []string
		req := dlq.RedriveRequest{DLQTopic: dlqTopic, DryRun: dry, Each: func(r dlq.Record, d dlq.Decision) {
			if d == dlq.Duplicate {
				dups = append(dups, fmt.Sprintf("%s@%d/%d", r.Key, r.Partition, r.Offset))
			}
		}}
		res, err := dlq.Redrive(ctxT(t), e.opts, req)
		if err != nil {
			t.Fatal(err)
		}
		res.StartedAt = time.Time{}
		if want := (dlq.RedriveResult{Scanned: 5, Sent: 3, Duplicates: 2}); res != want || len(dups) != 2 {
			t.Fatalf("dry run %v: result %+v, duplicates %v; want %+v", dry, res, dups, want)
		}
	}
	got := map[string]int{}
	for _, r := range e.k.ReadTopic(t, src) {
		got[string(r.Key)+"/"+testkit.Headers(r)[stages.HeaderRedriveCount]]++
	}
	if want := map[string]int{"FPT/1": 1, "FPT/2": 1, "SSI/1": 1}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("re-driven records by key and redrive count %v, want %v", got, want)
	}
}

// A re-driven record carries the coordinates of the record first
// dead-lettered (stages.HeaderOrigin), and keeps them when it fails again
// and is re-driven again (its dead letter's source is then the re-driven
// record).
func TestRedriveKeepsTheOrigin(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	first := spec{key: "FPT", value: `{}`, partition: 0, reason: "sanity_fail", srcTopic: e.src, srcPartition: 1, srcOffset: 5, failedAt: t0, redrives: -1}
	again := spec{key: "VNM", value: `{}`, partition: 0, reason: "sanity_fail", srcTopic: e.src, srcPartition: 1, srcOffset: 40, failedAt: t0, redrives: 1,
		extra: []kgo.RecordHeader{{Key: stages.HeaderOrigin, Value: []byte(e.src + "/1/5")}}}
	e.write(t, e.dlqTopic, first, again)
	if _, err := dlq.Redrive(ctxT(t), e.opts, dlq.RedriveRequest{DLQTopic: e.dlqTopic}); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, r := range e.k.ReadTopic(t, e.src) {
		got[string(r.Key)] = testkit.Headers(r)[stages.HeaderOrigin]
	}
	if want := e.src + "/1/5"; got["FPT"] != want || got["VNM"] != want {
		t.Fatalf("origins %v, want %s for both", got, want)
	}
}
