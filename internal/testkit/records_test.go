package testkit

import (
	"fmt"
	"maps"
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// values returns the values of recs per partition, in the order read.
func values(recs []*kgo.Record) map[int32][]string {
	out := map[int32][]string{}
	for _, r := range recs {
		out[r.Partition] = append(out[r.Partition], string(r.Value))
	}
	return out
}

func TestReadTopic(t *testing.T) {
	t.Parallel()
	k := NewKafka(t, FakeOK())
	topic := k.Topic(t, "read", 3)
	if recs := k.ReadTopic(t, topic); len(recs) != 0 {
		t.Fatalf("empty topic: read %d records, want none", len(recs))
	}

	cl := k.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	want := map[int32][]string{}
	var recs []*kgo.Record
	for i := range 10 {
		p := int32(i % 2) // partition 2 stays empty
		v := fmt.Sprintf("v%d", i)
		recs = append(recs, &kgo.Record{Topic: topic, Partition: p, Value: []byte(v), Headers: []kgo.RecordHeader{{Key: "i", Value: []byte(v)}}})
		want[p] = append(want[p], v)
	}
	if err := cl.ProduceSync(Context(t), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	got := k.ReadTopic(t, topic)
	if len(got) != 10 || !maps.EqualFunc(values(got), want, slices.Equal) {
		t.Fatalf("read %d records %v, want %v", len(got), values(got), want)
	}
	for _, r := range got {
		if h, _ := Header(r, "i"); r.Topic != topic || h != string(r.Value) {
			t.Errorf("record %s: topic %s header %q, want the topic and headers as produced", r.Value, r.Topic, h)
		}
	}
	// A second read sees the same records: nothing was consumed for good.
	if again := k.ReadTopic(t, topic); !maps.EqualFunc(values(again), want, slices.Equal) {
		t.Errorf("second read %v, want %v", values(again), want)
	}
}

// Transaction markers are never returned; read_committed leaves out aborted
// records and does not wait for more after a final commit marker.
func TestReadTopicTransactions(t *testing.T) {
	t.Parallel()
	k := NewKafka(t, FakeOK())
	topic := k.Topic(t, "txn", 1)
	cl := k.Client(t, kgo.TransactionalID(Name(t, "tx")), kgo.DefaultProduceTopic(topic))
	ctx := Context(t)
	txn := func(commit kgo.TransactionEndTry, vs ...string) {
		t.Helper()
		if err := cl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for _, v := range vs {
			if err := cl.ProduceSync(ctx, kgo.StringRecord(v)).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
		if err := cl.EndTransaction(ctx, commit); err != nil {
			t.Fatal(err)
		}
	}
	txn(kgo.TryCommit, "c0", "c1")
	txn(kgo.TryAbort, "a0", "a1")
	txn(kgo.TryCommit, "c2")

	committed := values(k.ReadTopic(t, topic, kgo.FetchIsolationLevel(kgo.ReadCommitted())))[0]
	if want := []string{"c0", "c1", "c2"}; !slices.Equal(committed, want) {
		t.Errorf("read_committed: %q, want %q", committed, want)
	}
	all := values(k.ReadTopic(t, topic))[0]
	if want := []string{"c0", "c1", "a0", "a1", "c2"}; !slices.Equal(all, want) {
		t.Errorf("read_uncommitted: %q, want %q (no markers)", all, want)
	}
}

func TestEndOffsetsAndCommitted(t *testing.T) {
	t.Parallel()
	k := NewKafka(t, FakeOK())
	topic, other := k.Topic(t, "offsets", 2), k.Topic(t, "other", 1)
	group := Name(t, "g")
	adm := k.Admin(t)
	if got := EndOffsets(t, adm, topic); !maps.Equal(got, map[int32]int64{0: 0, 1: 0}) {
		t.Errorf("EndOffsets of an empty topic = %v, want 0 for both partitions", got)
	}
	if got := Committed(t, adm, group, topic); len(got) != 0 {
		t.Errorf("Committed before any commit = %v, want none", got)
	}

	cl := k.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	for range 3 {
		if err := cl.ProduceSync(Context(t), &kgo.Record{Topic: topic, Partition: 1, Value: []byte("v")}, &kgo.Record{Topic: other, Value: []byte("v")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	if got := EndOffsets(t, adm, topic); !maps.Equal(got, map[int32]int64{0: 0, 1: 3}) {
		t.Errorf("EndOffsets = %v, want map[0:0 1:3]", got)
	}
	var os kadm.Offsets
	os.AddOffset(topic, 1, 2, -1)
	os.AddOffset(other, 0, 3, -1)
	if err := adm.CommitAllOffsets(Context(t), group, os); err != nil {
		t.Fatal(err)
	}
	if got := Committed(t, adm, group, topic); !maps.Equal(got, map[int32]int64{1: 2}) {
		t.Errorf("Committed = %v, want map[1:2] (partition 0 has no commit, the other topic is left out)", got)
	}
}

func TestHeaders(t *testing.T) {
	t.Parallel()
	r := &kgo.Record{Headers: []kgo.RecordHeader{{Key: "a", Value: []byte("1")}, {Key: "b", Value: []byte("2")}, {Key: "a", Value: []byte("3")}, {Key: "e"}}}
	for _, tc := range []struct {
		key   string
		want  string
		found bool
	}{
		{"a", "1", true}, // the first of two
		{"b", "2", true},
		{"e", "", true},
		{"missing", "", false},
	} {
		if got, found := Header(r, tc.key); got != tc.want || found != tc.found {
			t.Errorf("Header(%q) = %q, %v; want %q, %v", tc.key, got, found, tc.want, tc.found)
		}
	}
	if got, want := Headers(r), map[string]string{"a": "3", "b": "2", "e": ""}; !maps.Equal(got, want) {
		t.Errorf("Headers = %v, want %v (the last of two wins)", got, want)
	}
	if got := Headers(&kgo.Record{}); got == nil || len(got) != 0 {
		t.Errorf("Headers of a record without headers = %#v, want an empty map", got)
	}
}
