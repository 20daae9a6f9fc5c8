package run_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/sinks/memsink"
	"github.com/sluicehq/sluice/stages"
	"github.com/sluicehq/sluice/stages/run"
)

// StopAtEnd: Run processes the group's backlog and returns nil by itself,
// having committed every partition up to its end, a partition that ends
// with transaction markers included (read_committed: the aborted record is
// never seen); a run with nothing left returns at once and a later run
// takes only the new records.
func TestStopAtEnd(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.FakeOK())
	cfg := baseConfig(t, k, 2)
	cfg.StopAtEnd = true
	cfg.StopIdle = 10 * time.Minute // only reaching the end can stop it within the test's time
	topic := cfg.Topics[0]
	ctx := testkit.Context(t)
	manual := kgo.RecordPartitioner(kgo.ManualPartitioner())
	cl := k.Client(t, manual)
	for _, v := range []string{"a", "b", "c"} {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: 0, Value: []byte(v)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	txc := k.Client(t, manual, kgo.TransactionalID(testkit.Name(t, "txn")))
	for _, tx := range []struct {
		values []string
		end    kgo.TransactionEndTry
	}{{[]string{"t1", "t2"}, kgo.TryCommit}, {[]string{"aborted"}, kgo.TryAbort}} {
		if err := txc.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for _, v := range tx.values {
			if err := txc.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: 1, Value: []byte(v)}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
		if err := txc.EndTransaction(ctx, tx.end); err != nil {
			t.Fatal(err)
		}
	}
	adm := k.Admin(t)
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	sink := memsink.New[msg]()
	runOnce := func() {
		t.Helper()
		r, err := run.New(cfg, decodeString, passthrough, sink,
			run.WithKafkaOpts(kgo.SeedBrokers(k.Brokers...), kgo.FetchMaxWait(200*time.Millisecond), kgo.FetchIsolationLevel(kgo.ReadCommitted())))
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Run(ctx); err != nil {
			t.Fatalf("Run: %v", err)
		}
	}

	runOnce()
	var got []string
	for _, m := range sink.Items() {
		got = append(got, m.Value)
	}
	if strings.Join(got, ",") != "a,b,c,t1,t2" && strings.Join(got, ",") != "t1,t2,a,b,c" {
		t.Fatalf("processed %v, want a, b, c and t1, t2 (not the aborted record)", got)
	}
	committed := testkit.Committed(t, adm, cfg.Group, topic)
	for p, want := range map[int32]int64{0: 3, 1: 0} {
		end, _ := ends.Lookup(topic, p)
		if want == 0 {
			want = end.Offset // past the abort marker
		}
		if committed[p] != want || end.Offset != want {
			t.Fatalf("partition %d committed at %d, want its end %d", p, committed[p], end.Offset)
		}
	}

	writes := sink.Writes()
	runOnce()
	if sink.Writes() != writes {
		t.Fatalf("a run with nothing pending wrote %d batch(es)", sink.Writes()-writes)
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: 0, Value: []byte("d")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	runOnce()
	if items := sink.Items(); len(items) != 6 || items[5].Value != "d" {
		t.Fatalf("third run: %d items, want the 5 before and d", len(items))
	}
}

// StopAtEnd on an input topic that does not exist fails.
func TestStopAtEndMissingTopic(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.FakeOK())
	cfg := baseConfig(t, k, 1)
	cfg.StopAtEnd = true
	cfg.Topics = []string{testkit.Name(t, "missing")}
	r, err := run.New(cfg, decodeString, passthrough, memsink.New[msg](), run.WithKafkaOpts(kgo.SeedBrokers(k.Brokers...)))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Run(testkit.Context(t)); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("Run = %v, want the topic named missing", err)
	}
}

// NoDLQ: a record that would be dead-lettered stops the runner with a
// fatal error naming it; nothing is produced and its offset is not
// committed.
func TestNoDLQ(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.FakeOK())
	cfg := baseConfig(t, k, 1)
	cfg.DLQTopic, cfg.NoDLQ = "", true
	topic := cfg.Topics[0]
	produce(t, k.Client(t), topic, 3, 1, func(i int) string { return []string{"ok", "bad", "ok"}[i] })
	decode := func(_, v []byte) (string, error) {
		if string(v) == "bad" {
			return "", errors.New("undecodable")
		}
		return string(v), nil
	}
	r, err := run.New(cfg, decode, passthrough, memsink.New[msg](), run.WithKafkaOpts(kgo.SeedBrokers(k.Brokers...)))
	if err != nil {
		t.Fatal(err)
	}
	err = r.Run(testkit.Context(t))
	if c := stages.Classify(err); c == nil || c.Kind != stages.KindFatal || !strings.Contains(err.Error(), topic+"/0@1") || !strings.Contains(err.Error(), "decode_error") {
		t.Fatalf("Run = %v, want a fatal error naming %s/0@1 and decode_error", err, topic)
	}
	if c, ok := testkit.Committed(t, k.Admin(t), cfg.Group, topic)[0]; ok && c > 1 {
		t.Fatalf("committed %d, past the record that could not be dead-lettered", c)
	}

	cfg.DLQTopic = "dlq"
	if _, err := run.New(cfg, decode, passthrough, memsink.New[msg]()); err == nil {
		t.Fatal("New accepted NoDLQ with a DLQ topic")
	}
	cfg.DLQTopic = ""
	stage := func(context.Context, msg) ([]*kgo.Record, error) { return nil, nil }
	if _, err := run.NewTransactional(cfg, "tx", decode, stage); err == nil {
		t.Fatal("NewTransactional accepted NoDLQ")
	}
}

// sluice_records_done_total counts the records made durable, as
// sluice_records_in_total counts those consumed: transaction markers
// (kept by StopAtEnd to see a partition's end) are in neither.
func TestRecordsDoneLeavesOutTransactionMarkers(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.FakeOK())
	cfg := baseConfig(t, k, 1)
	cfg.StopAtEnd = true
	cfg.StopIdle = 10 * time.Minute // only reaching the end can stop it within the test's time
	topic := cfg.Topics[0]
	ctx := testkit.Context(t)
	txc := k.Client(t, kgo.TransactionalID(testkit.Name(t, "txn")), kgo.DefaultProduceTopic(topic))
	for range 2 { // two transactions of two records: four records, two markers
		if err := txc.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		if err := txc.ProduceSync(ctx, kgo.StringRecord("a"), kgo.StringRecord("b")).FirstErr(); err != nil {
			t.Fatal(err)
		}
		if err := txc.EndTransaction(ctx, kgo.TryCommit); err != nil {
			t.Fatal(err)
		}
	}
	reg := prometheus.NewRegistry()
	sink := memsink.New[msg]()
	r, err := run.New(cfg, decodeString, passthrough, sink, run.WithRegisterer(reg),
		run.WithKafkaOpts(kgo.SeedBrokers(k.Brokers...), kgo.FetchMaxWait(200*time.Millisecond), kgo.FetchIsolationLevel(kgo.ReadCommitted())))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Run(ctx); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if got := testkit.Committed(t, k.Admin(t), cfg.Group, topic)[0]; got != 6 {
		t.Fatalf("committed at %d, want 6 (past both markers)", got)
	}
	for _, name := range []string{"sluice_records_in_total", "sluice_records_done_total"} {
		if got := testkit.Metric(t, reg, name, "topic", topic); got != 4 {
			t.Errorf("%s = %v, want 4 (the data records, not the markers)", name, got)
		}
	}
	if sink.Len() != 4 {
		t.Errorf("sink got %d records, want 4", sink.Len())
	}
}
