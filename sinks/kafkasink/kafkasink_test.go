package kafkasink_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/sinks/kafkasink"
	"github.com/sluicehq/sluice/stages"
)

func randomBytes(rng *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32()) // incompressible: the broker sees its size
	}
	return b
}

// The topic refuses a record larger than its max.message.bytes, and a
// produce batch of records that fit alone but not together. Write names
// the record that can never fit as a rejection (so that the runtime
// dead-letters its source record instead of retrying the batch for ever)
// and lands every other record, the last copy of each in batch order.
func TestWriteRejectsRecordTooLargeForTheTopic(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.ForceFake())
	maxBytes := "16384"
	topic := k.Topic(t, "out", 1, map[string]*string{"max.message.bytes": &maxBytes})
	cl := k.Client(t)
	rng := rand.New(rand.NewPCG(3, 4))
	const huge = 4
	var batch []*kgo.Record
	for i := range 10 {
		size := 3000
		if i == huge {
			size = 64 << 10
		}
		v := append([]byte(fmt.Sprintf("r%d:", i)), randomBytes(rng, size)...)
		batch = append(batch, &kgo.Record{Topic: topic, Key: []byte("k"), Value: v})
	}
	err := kafkasink.Records(cl).Write(context.Background(), batch)
	var rej *stages.Rejections
	if !errors.As(err, &rej) {
		t.Fatalf("Write = %v, want *stages.Rejections naming the record too large", err)
	}
	if len(rej.Items) != 1 || rej.Items[0].Index != huge || rej.Items[0].Err == nil {
		t.Fatalf("rejections = %+v, want only index %d", rej.Items, huge)
	}
	got := k.ReadTopic(t, topic)
	var last []string // values in order of their last copy
	for _, r := range got {
		id := string(r.Value[:3])
		last = slices.DeleteFunc(last, func(s string) bool { return s == id })
		last = append(last, id)
	}
	want := []string{"r0:", "r1:", "r2:", "r3:", "r5:", "r6:", "r7:", "r8:", "r9:"}
	if !slices.Equal(last, want) {
		t.Fatalf("topic holds %v (by last copy, %d records), want %v", last, len(got), want)
	}
}

// An error the mapping function returns for one item concerns that item
// alone: Write rejects it with rule kafka.mapping (the runtime dead-letters
// its source record) and lands every other record, in batch order. A
// rejection names the item's index in the batch, also for a record refused
// as too large after a mapping failure.
func TestWriteRejectsItemTheMappingFailsOn(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.ForceFake())
	maxBytes := "16384"
	topic := k.Topic(t, "out", 1, map[string]*string{"max.message.bytes": &maxBytes})
	cl := k.Client(t)
	errBad := errors.New("cannot encode item")
	rng := rand.New(rand.NewPCG(5, 6))
	const bad, huge = 1, 3
	sink := kafkasink.New(cl, func(i int) (*kgo.Record, error) {
		switch i {
		case bad:
			return nil, errBad
		case huge:
			return &kgo.Record{Topic: topic, Value: randomBytes(rng, 64<<10)}, nil
		}
		return &kgo.Record{Topic: topic, Key: []byte("k"), Value: fmt.Appendf(nil, "r%d", i)}, nil
	})
	err := sink.Write(context.Background(), []int{0, 1, 2, 3, 4})
	var rej *stages.Rejections
	if !errors.As(err, &rej) {
		t.Fatalf("Write = %v, want *stages.Rejections naming the item the mapping failed on", err)
	}
	got := map[int]string{}
	for _, it := range rej.Items {
		got[it.Index] = it.Rule
	}
	want := map[int]string{bad: kafkasink.RuleMapping, huge: kafkasink.RuleTooLarge}
	if len(rej.Items) != 2 || got[bad] != want[bad] || got[huge] != want[huge] {
		t.Fatalf("rejections = %+v, want index %d rule %s and index %d rule %s", rej.Items, bad, kafkasink.RuleMapping, huge, kafkasink.RuleTooLarge)
	}
	for _, it := range rej.Items {
		if it.Index == bad && !errors.Is(it.Err, errBad) {
			t.Errorf("mapping rejection error = %v, want it to wrap the mapping error", it.Err)
		}
	}
	var vals []string
	for _, r := range k.ReadTopic(t, topic) {
		vals = append(vals, string(r.Value))
	}
	if !slices.Equal(vals, []string{"r0", "r2", "r4"}) {
		t.Fatalf("topic holds %q, want [r0 r2 r4]", vals)
	}
}

// A mapping error is read with the error vocabulary of package stages. A
// plain error rejects the item with rule kafka.mapping; a dead-letter error
// rejects it with the caller's own rule (an empty one included) and an
// error that still classifies with the caller's reason; both land the rest
// of the batch. A retry or fatal error fails the whole Write with that
// classification and produces nothing: a fatal mapping error is never
// turned into a dead letter.
func TestWriteMappingErrorClassification(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.ForceFake())
	cl := k.Client(t)
	errBad := errors.New("cannot encode item")
	for _, tc := range []struct {
		name       string
		err        error
		reject     bool          // the item is rejected and the rest lands
		rule       string        // rule of the rejection
		reason     stages.Reason // reason stages.Classify reads from the rejection's error
		kind       stages.Kind   // kind of the Write error when !reject
		retryAfter time.Duration
	}{
		{name: "plain", err: errBad, reject: true, rule: kafkasink.RuleMapping},
		{name: "wrapped plain", err: fmt.Errorf("field x: %w", errBad), reject: true, rule: kafkasink.RuleMapping},
		{name: "dead letter", err: stages.DeadLetter(stages.ReasonSanityFail, "out.price", errBad),
			reject: true, rule: "out.price", reason: stages.ReasonSanityFail},
		{name: "wrapped dead letter", err: fmt.Errorf("encode: %w", stages.DeadLetter(stages.ReasonUnknownTaskType, "out.type", errBad)),
			reject: true, rule: "out.type", reason: stages.ReasonUnknownTaskType},
		{name: "dead letter without rule", err: stages.DeadLetter(stages.ReasonDecodeError, "", errBad),
			reject: true, rule: "", reason: stages.ReasonDecodeError},
		{name: "dead letter sink_rejected", err: stages.DeadLetter(stages.ReasonSinkRejected, "out.schema", errBad),
			reject: true, rule: "out.schema", reason: stages.ReasonSinkRejected},
		{name: "retry", err: stages.Retry(errBad), kind: stages.KindRetry},
		{name: "retry after", err: stages.RetryAfter(3*time.Second, errBad), kind: stages.KindRetry, retryAfter: 3 * time.Second},
		{name: "fatal", err: stages.Fatal(errBad), kind: stages.KindFatal},
		{name: "wrapped fatal", err: fmt.Errorf("registry: %w", stages.Fatal(errBad)), kind: stages.KindFatal},
	} {
		t.Run(tc.name, func(t *testing.T) {
			topic := k.Topic(t, "out", 1)
			const bad = 1
			sink := kafkasink.New(cl, func(i int) (*kgo.Record, error) {
				if i == bad {
					return nil, tc.err
				}
				return &kgo.Record{Topic: topic, Key: []byte("k"), Value: fmt.Appendf(nil, "r%d", i)}, nil
			})
			err := sink.Write(context.Background(), []int{0, 1, 2})
			var vals []string
			for _, r := range k.ReadTopic(t, topic) {
				vals = append(vals, string(r.Value))
			}
			var rej *stages.Rejections
			if !tc.reject {
				c := stages.Classify(err)
				if errors.As(err, &rej) || c == nil || c.Kind != tc.kind || c.After != tc.retryAfter {
					t.Fatalf("Write = %v, want a non-rejection error of kind %d (after %v)", err, tc.kind, tc.retryAfter)
				}
				if !errors.Is(err, errBad) || !strings.Contains(err.Error(), "item 1") {
					t.Errorf("Write error %q does not wrap the mapping error or name the item", err)
				}
				if len(vals) != 0 {
					t.Fatalf("topic holds %q, want nothing", vals)
				}
				return
			}
			if !errors.As(err, &rej) {
				t.Fatalf("Write = %v, want *stages.Rejections", err)
			}
			if len(rej.Items) != 1 || rej.Items[0].Index != bad || rej.Items[0].Rule != tc.rule {
				t.Fatalf("rejections = %+v, want only index %d with rule %q", rej.Items, bad, tc.rule)
			}
			it := rej.Items[0]
			if !errors.Is(it.Err, errBad) {
				t.Errorf("rejection error %v does not wrap the mapping error", it.Err)
			}
			var c *stages.Error
			switch {
			case tc.reason == "" && errors.As(it.Err, &c):
				t.Errorf("rejection error %v of a plain mapping error carries a classification %+v", it.Err, c)
			case tc.reason != "" && (!errors.As(it.Err, &c) || c.Kind != stages.KindDeadLetter || c.Reason != tc.reason || c.Rule != tc.rule):
				t.Errorf("rejection error %v does not keep the caller's dead letter (reason %s, rule %q)", it.Err, tc.reason, tc.rule)
			}
			if !slices.Equal(vals, []string{"r0", "r2"}) {
				t.Fatalf("topic holds %q, want [r0 r2]", vals)
			}
		})
	}
}

// The same *kgo.Record at several positions of one batch (a Records batch
// holding one pointer twice, or a mapping function returning a cached
// record) is one item per position: each position is written or rejected
// on its own, exactly once, and a rejection names that position.
func TestWriteSameRecordAtSeveralPositions(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.ForceFake())
	cl := k.Client(t)
	maxBytes := "16384"
	rng := rand.New(rand.NewPCG(7, 8))
	hugeValue := randomBytes(rng, 64<<10)
	type want struct {
		rejected map[int]string // index → rule
		last     []string       // values on the topic in order of their last copy
		count    int            // records on the topic, when the batch cannot be refused (0: unchecked)
	}
	for _, tc := range []struct {
		name string
		// batch builds the records of positions 0…n-1 for topic; equal
		// letters are the same pointer. "H" is too large for the topic,
		// "!" fails the mapping.
		layout string
		want   want
	}{
		{name: "huge twice", layout: "HaHb",
			want: want{rejected: map[int]string{0: kafkasink.RuleTooLarge, 2: kafkasink.RuleTooLarge}, last: []string{"a", "b"}}},
		{name: "huge twice, first last", layout: "aHbcH",
			want: want{rejected: map[int]string{1: kafkasink.RuleTooLarge, 4: kafkasink.RuleTooLarge}, last: []string{"a", "b", "c"}}},
		{name: "huge three times around a mapping failure", layout: "H!HaH",
			want: want{rejected: map[int]string{0: kafkasink.RuleTooLarge, 1: kafkasink.RuleMapping, 2: kafkasink.RuleTooLarge, 4: kafkasink.RuleTooLarge}, last: []string{"a"}}},
		{name: "small twice", layout: "a!ab",
			want: want{rejected: map[int]string{1: kafkasink.RuleMapping}, last: []string{"a", "b"}, count: 3}},
	} {
		for _, via := range []string{"Records", "New"} {
			if via == "Records" && strings.Contains(tc.layout, "!") {
				continue // a Records batch has no mapping failures
			}
			t.Run(tc.name+"/"+via, func(t *testing.T) {
				topic := k.Topic(t, "out", 1, map[string]*string{"max.message.bytes": &maxBytes})
				recs := map[byte]*kgo.Record{}
				for _, c := range []byte(tc.layout) {
					if _, ok := recs[c]; ok || c == '!' {
						continue
					}
					v := []byte{c}
					if c == 'H' {
						v = hugeValue
					}
					recs[c] = &kgo.Record{Topic: topic, Key: []byte("k"), Value: v}
				}
				var err error
				switch via {
				case "Records":
					var batch []*kgo.Record
					for _, c := range []byte(tc.layout) {
						batch = append(batch, recs[c])
					}
					err = kafkasink.Records(cl).Write(context.Background(), batch)
				case "New":
					sink := kafkasink.New(cl, func(c byte) (*kgo.Record, error) {
						if c == '!' {
							return nil, errors.New("not mappable")
						}
						return recs[c], nil // cached: the same pointer for equal letters
					})
					err = sink.Write(context.Background(), []byte(tc.layout))
				}
				got := map[int]string{}
				var rej *stages.Rejections
				if errors.As(err, &rej) {
					for n, it := range rej.Items {
						if _, dup := got[it.Index]; dup {
							t.Errorf("index %d rejected twice: %+v", it.Index, rej.Items)
						}
						if n > 0 && it.Index < rej.Items[n-1].Index {
							t.Errorf("rejections not in batch order: %+v", rej.Items)
						}
						got[it.Index] = it.Rule
					}
				} else if err != nil {
					t.Fatalf("Write = %v, want nil or *stages.Rejections", err)
				}
				if !maps.Equal(got, tc.want.rejected) {
					t.Fatalf("rejections = %+v, want index → rule %v", rej.Items, tc.want.rejected)
				}
				onTopic := k.ReadTopic(t, topic)
				var last []string
				for _, r := range onTopic {
					id := string(r.Value)
					last = slices.DeleteFunc(last, func(s string) bool { return s == id })
					last = append(last, id)
				}
				if !slices.Equal(last, tc.want.last) {
					t.Fatalf("topic holds %v (by last copy, %d records), want %v", last, len(onTopic), tc.want.last)
				}
				if tc.want.count > 0 && len(onTopic) != tc.want.count {
					t.Fatalf("topic holds %d records, want %d (one per written position)", len(onTopic), tc.want.count)
				}
			})
		}
	}
}

// An item mapped to a record without a topic (and no default produce topic)
// would fail for every record: Write returns a fatal error saying so and
// produces nothing, instead of a transient error retried for ever.
func TestWriteWithoutTopicIsFatal(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.ForceFake())
	topic := k.Topic(t, "out", 1)
	cl := k.Client(t)
	sink := kafkasink.New(cl, func(i int) (*kgo.Record, error) {
		if i == 1 {
			return &kgo.Record{Value: []byte("no topic")}, nil
		}
		return &kgo.Record{Topic: topic, Value: []byte("v")}, nil
	})
	err := sink.Write(context.Background(), []int{0, 1, 2})
	if c := stages.Classify(err); c == nil || c.Kind != stages.KindFatal {
		t.Fatalf("Write = %v, want a fatal error", err)
	}
	if msg := err.Error(); !strings.Contains(msg, "item 1") || !strings.Contains(msg, "without a topic") {
		t.Fatalf("error %q does not name the item and the missing topic", msg)
	}
	if n := len(k.ReadTopic(t, topic)); n != 0 {
		t.Fatalf("topic holds %d records, want none", n)
	}
}
