package ticks_test

import (
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/pipelines/ticks"
	"github.com/sluicehq/sluice/stages"
)

// Every bad or odd record of ingest.tasks is dead-lettered with a clear
// reason and rule (or dropped, when the design says so) without blocking
// its partition: a valid job triggered after all of them completes, and
// nothing else is written.
func TestBadTasksDeadLetteredWithoutBlocking(t *testing.T) {
	t.Parallel()
	f := newFixture(t, ticks.SyntheticConfig{}, nil)
	ctx := testkit.Context(t)
	sess := f.tradingHours(t, "NQ")
	inst := uuid.NewString()
	trig := func(sym, date, account string, start, end int64) ticks.Task {
		return ticks.Task{Kind: ticks.KindTrigger, Symbol: sym, Date: date, JobKey: ticks.JobKey(sym, date), JobInstanceID: uuid.NewString(), AccountID: account, StartTime: start, EndTime: end}
	}
	long := strings.Repeat("X", 600<<10) // with its echo in dlq.error, over the 1 MB record limit
	cases := []badTask{
		{"tombstone", "TOMB:" + testDate, nil, stages.ReasonDecodeError, ""},
		{"empty value", "EMPTY:" + testDate, []byte{}, stages.ReasonDecodeError, ""},
		{"invalid JSON", "JSON:" + testDate, []byte(`{"kind":"trigger",`), stages.ReasonDecodeError, ""},
		{"JSON array", "ARR:" + testDate, []byte(`[1,2]`), stages.ReasonDecodeError, ""},
		{"wrong types", "TYPE:" + testDate, []byte(`{"kind":"trigger","symbol":5,"date":true,"start_time":"soon"}`), stages.ReasonDecodeError, ""},
		{"NaN-like number", "NAN:" + testDate, []byte(`{"kind":"trigger","symbol":"NAN","date":"` + testDate + `","job_instance_id":"` + uuid.NewString() + `","start_time":"NaN","end_time":1e400}`), stages.ReasonDecodeError, ""},
		{"missing fields", "MISS:" + testDate, []byte(`{}`), stages.ReasonDecodeError, ""},
		{"key does not match value", "KEYA:" + testDate, taskJSON(t, trig("KEYB", testDate, "U1", sess.Start, sess.End)), stages.ReasonDecodeError, ""},
		{"bad instance id", "INST:" + testDate, []byte(`{"kind":"trigger","symbol":"INST","date":"` + testDate + `","job_instance_id":"not-a-uuid","start_time":1,"end_time":2}`), stages.ReasonDecodeError, ""},
		{"unknown kind", "KIND:" + testDate, []byte(`{"kind":"explode","symbol":"KIND","date":"` + testDate + `","job_instance_id":"` + uuid.NewString() + `"}`), stages.ReasonUnknownTaskType, ""},
		{"end before start", "REV:" + testDate, taskJSON(t, trig("REV", testDate, "U1", sess.End, sess.Start)), stages.ReasonSanityFail, "ticks.session"},
		{"negative session", "NEG:" + testDate, taskJSON(t, trig("NEG", testDate, "U1", -5, -1)), stages.ReasonSanityFail, "ticks.session"},
		{"invalid symbol", "bad/sym:" + testDate, taskJSON(t, trig("bad/sym", testDate, "U1", sess.Start, sess.End)), stages.ReasonSanityFail, "ticks.symbol"},
		{"invalid date", "DATE:2025-13-45", taskJSON(t, trig("DATE", "2025-13-45", "U1", sess.Start, sess.End)), stages.ReasonSanityFail, "ticks.date"},
		{"invalid account", "ACCT:" + testDate, taskJSON(t, trig("ACCT", testDate, "U1 OR 1=1", sess.Start, sess.End)), stages.ReasonSanityFail, "ticks.account"},
		{"very long account", "LACCT:" + testDate, taskJSON(t, trig("LACCT", testDate, strings.Repeat("a", 5000), sess.Start, sess.End)), stages.ReasonSanityFail, "ticks.account"},
		{"session decades before the date", "OLD:" + testDate, taskJSON(t, trig("OLD", testDate, "U1", 1, sess.End)), stages.ReasonSanityFail, "ticks.session"},
		{"session far after the date", "FUT:" + testDate, taskJSON(t, trig("FUT", testDate, "U1", sess.Start, sess.End+400*24*3600*1000)), stages.ReasonSanityFail, "ticks.session"},
		{"date far in the future", "FAR:9999-12-31", taskJSON(t, trig("FAR", "9999-12-31", "U1", sess.Start, sess.End)), stages.ReasonSanityFail, "ticks.session"},
		{"bootstrap without state", "BOOT:" + testDate, []byte(`{"kind":"bootstrap","symbol":"BOOT","date":"` + testDate + `"}`), stages.ReasonSanityFail, "ticks.bootstrap"},
		{"segment of an unknown job (zombie)", "ZOMB:" + testDate, taskJSON(t, ticks.Task{Kind: ticks.KindSegment, Symbol: "ZOMB", Date: testDate, JobKey: "ZOMB:" + testDate, JobInstanceID: uuid.NewString(), StartTs: sess.Start}), "", ""},
		{"stall of an unknown job", "STAL:" + testDate, taskJSON(t, ticks.Task{Kind: ticks.KindStall, Symbol: "STAL", Date: testDate, JobKey: "STAL:" + testDate, JobInstanceID: uuid.NewString(), HeartbeatAt: 1}), "", ""},
		{"very long mismatched job_key", "LONG:" + testDate, []byte(`{"job_key":"` + long + `"}`), stages.ReasonDecodeError, ""},
		{"very long kind", "LKIND:" + testDate, []byte(`{"kind":"` + long + `","symbol":"LKIND","date":"` + testDate + `","job_instance_id":"` + uuid.NewString() + `"}`), stages.ReasonUnknownTaskType, ""},
		{"very long instance id", "LINST:" + testDate, []byte(`{"symbol":"LINST","date":"` + testDate + `","job_instance_id":"` + long + `"}`), stages.ReasonDecodeError, ""},
	}
	// All on one partition, in this order, then the good trigger and a
	// duplicate of it: the good job must not wait behind any of them.
	const part = 1
	good := trig("NQ", testDate, "U1", sess.Start, sess.End)
	good.JobInstanceID = inst
	var recs []*kgo.Record
	for _, c := range cases {
		recs = append(recs, &kgo.Record{Topic: f.cfg.TasksTopic, Partition: part, Key: []byte(c.key), Value: c.value})
	}
	gv := taskJSON(t, good)
	recs = append(recs,
		&kgo.Record{Topic: f.cfg.TasksTopic, Partition: part, Key: []byte(good.JobKey), Value: gv},
		&kgo.Record{Topic: f.cfg.TasksTopic, Partition: part, Key: []byte(good.JobKey), Value: gv})
	prod := f.k.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerBatchMaxBytes(4<<20))
	if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	f.startWorker(t)
	// The good job's state lives in the jobs partition of its task
	// partition, whatever its key hashes to.
	var st *ticks.JobState
	testkit.WaitFor(t, 60*time.Second, "the good job COMPLETED behind the bad records", func() bool {
		all, err := ticks.ReadJobs(ctx, f.env.Kafka, f.cfg.JobsTopic, nil)
		if err != nil {
			t.Fatal(err)
		}
		st = ticks.Flatten(all)[good.JobKey]
		return st != nil && st.Status == ticks.StatusCompleted
	})
	if st.JobInstanceID != inst || st.Cursor != sess.End {
		t.Errorf("good job %+v", st)
	}

	want := map[string]badTask{}
	for _, c := range cases {
		if c.reason != "" {
			want[c.key] = c
		}
	}
	var dlq []*kgo.Record
	testkit.WaitFor(t, 20*time.Second, "every bad record dead-lettered", func() bool {
		dlq = f.k.ReadTopic(t, f.cfg.DLQTopic, kgo.FetchMaxBytes(8<<20), testkit.ReadCommitted())
		return len(dlq) >= len(want)
	})
	checkDeadLetters(t, dlq, want, func(c badTask, r *kgo.Record, h map[string]string) {
		if h[stages.HeaderReason] != string(c.reason) || h[stages.HeaderRule] != c.rule || h[stages.HeaderError] == "" ||
			h[stages.HeaderSourceTopic] != f.cfg.TasksTopic || h[stages.HeaderSourcePartition] != "1" {
			t.Errorf("%s: headers reason=%q rule=%q error=%.80q source=%s/%s; want reason %q rule %q",
				c.name, h[stages.HeaderReason], h[stages.HeaderRule], h[stages.HeaderError], h[stages.HeaderSourceTopic], h[stages.HeaderSourcePartition], c.reason, c.rule)
		}
		if string(r.Value) != string(c.value) {
			t.Errorf("%s: DLQ value is not the original value", c.name)
		}
		if len(h[stages.HeaderError]) > 4<<10 {
			t.Errorf("%s: dlq.error is %d bytes, want a bounded message", c.name, len(h[stages.HeaderError]))
		}
	})
	// Bad records wrote no job state; the good job was triggered once.
	all, err := ticks.ReadJobs(ctx, f.env.Kafka, f.cfg.JobsTopic, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k := range ticks.Flatten(all) {
		if k != good.JobKey {
			t.Errorf("a bad record created job state %.60q", k)
		}
	}
	if n := testkit.Metric(t, f.reg, "sluice_ticks_job_transitions_total", "status", "PENDING"); n != 1 {
		t.Errorf("%v PENDING transitions, want 1 (duplicate trigger dropped)", n)
	}
	if n := testkit.Metric(t, f.reg, "sluice_ticks_zombie_tasks_total"); n < 1 {
		t.Errorf("zombie metric %v, want ≥ 1", n)
	}
}
