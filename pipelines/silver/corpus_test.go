package silver

import (
	"bytes"
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/sluicehq/sluice/stages"
)

func TestCorpusVerdicts(t *testing.T) {
	t.Parallel()
	const n = 40000
	recs := GenerateCorpus(7, n, 0.3)
	if len(recs) != n {
		t.Fatalf("len = %d", len(recs))
	}
	stage := Stage() // real clock: the corpus is dated in the past
	var ta, sa, invalid int
	perRule := map[string]int{}
	perReason := map[stages.Reason]int{}
	keys := map[string]int{}
	for i, rec := range recs {
		env, err := Decode([]byte(rec.Key), rec.Value)
		var rows []Row
		if err == nil {
			rows, err = stage(context.Background(), stages.Msg[Envelope]{Key: rec.Key, Value: env})
		}
		if rec.WantReason == "" {
			if err != nil {
				t.Fatalf("record %d should be valid: %v\n%s", i, err, rec.Value)
			}
			r := rows[0]
			switch {
			case r.TA != nil:
				ta++
				if rec.Key != r.TA.Symbol {
					t.Fatalf("record %d: key %q, symbol %q", i, rec.Key, r.TA.Symbol)
				}
			case r.SA != nil:
				sa++
				if rec.Key != r.SA.URLCanonical {
					t.Fatalf("record %d: key %q, url %q", i, rec.Key, r.SA.URLCanonical)
				}
			}
			keys[r.Key()]++
			continue
		}
		invalid++
		c := stages.Classify(err)
		if c == nil || c.Kind != stages.KindDeadLetter || c.Reason != rec.WantReason || c.Rule != rec.WantRule {
			t.Fatalf("record %d: want %s/%q, got %+v\n%s", i, rec.WantReason, rec.WantRule, c, rec.Value)
		}
		perReason[c.Reason]++
		if c.Rule != "" {
			perRule[c.Rule]++
		}
	}
	if f := float64(invalid) / n; f < 0.27 || f > 0.33 {
		t.Errorf("invalid fraction = %.3f, want ≈0.3", f)
	}
	if d := ta - sa; d > n/20 || -d > n/20 {
		t.Errorf("valid ta = %d, sa = %d: want about half each", ta, sa)
	}
	for _, rule := range Rules() {
		if perRule[rule] < 300 {
			t.Errorf("rule %s: %d invalid records, want them spread evenly", rule, perRule[rule])
		}
	}
	for _, r := range []stages.Reason{stages.ReasonDecodeError, stages.ReasonUnknownTaskType} {
		if perReason[r] < 300 {
			t.Errorf("reason %s: %d records", r, perReason[r])
		}
	}
	repeated := 0
	for _, c := range keys {
		if c > 1 {
			repeated++
		}
	}
	if repeated < len(keys)/3 {
		t.Errorf("%d of %d keys repeat; want merges to happen", repeated, len(keys))
	}
}

func TestCorpusDeterministic(t *testing.T) {
	t.Parallel()
	a := GenerateCorpus(42, 2000, 0.2)
	b := GenerateCorpus(42, 2000, 0.2)
	c := GenerateCorpus(43, 2000, 0.2)
	same := 0
	for i := range a {
		if a[i].Key != b[i].Key || !bytes.Equal(a[i].Value, b[i].Value) || a[i].WantRule != b[i].WantRule || a[i].WantReason != b[i].WantReason {
			t.Fatalf("record %d differs between runs with one seed", i)
		}
		if bytes.Equal(a[i].Value, c[i].Value) {
			same++
		}
	}
	if same > 10 {
		t.Errorf("%d records identical across seeds", same)
	}
	if v := GenerateCorpus(1, 500, 0); countInvalid(v) != 0 {
		t.Errorf("invalidFraction 0 produced invalid records")
	}
	if v := GenerateCorpus(1, 500, 1); countInvalid(v) != 500 {
		t.Errorf("invalidFraction 1 produced valid records")
	}
}

func countInvalid(rs []Record) int {
	n := 0
	for _, r := range rs {
		if r.WantReason != "" {
			n++
		}
	}
	return n
}

func BenchmarkGenerateCorpus(b *testing.B) {
	c := NewCorpus(1, 0.1)
	b.ReportAllocs()
	var bytes int64
	for b.Loop() {
		r := c.Next()
		bytes += int64(len(r.Value))
	}
	b.SetBytes(bytes / int64(max(b.N, 1)))
}

func BenchmarkStage(b *testing.B) {
	recs := GenerateCorpus(1, 10000, 0.1)
	stage := Stage()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		rec := recs[i%len(recs)]
		i++
		env, err := Decode(nil, rec.Value)
		if err == nil {
			_, _ = stage(context.Background(), stages.Msg[Envelope]{Value: env})
		}
	}
}

// TestCorpusDecodedMatchesHandBuilt runs every record of a corpus through
// Decode and the stage twice: with the envelope as Decode returns it (the
// payload fields it indexed) and as a hand-built copy (the stage parses the
// payload itself). Both must reach the record's verdict and the same rows
// or the same error.
func TestCorpusDecodedMatchesHandBuilt(t *testing.T) {
	t.Parallel()
	recs := GenerateCorpus(11, 20000, 0.1)
	now := time.Date(2025, 6, 10, 12, 0, 0, 0, time.UTC) // after the corpus's default now
	stage := Stage(WithClock(func() time.Time { return now }))
	ctx := context.Background()
	for i, rec := range recs {
		env, err := Decode([]byte(rec.Key), rec.Value)
		var rows, rows2 []Row
		var err2 error
		if err == nil {
			src := stages.Source{Timestamp: now.Add(-time.Hour)}
			rows, err = stage(ctx, stages.Msg[Envelope]{Key: rec.Key, Value: env, Source: src})
			hand := Envelope{TaskType: env.TaskType, Payload: env.Payload, TaskID: env.TaskID, FirstSeen: env.FirstSeen}
			rows2, err2 = stage(ctx, stages.Msg[Envelope]{Key: rec.Key, Value: hand, Source: src})
			if fmt.Sprint(err) != fmt.Sprint(err2) || !reflect.DeepEqual(rows, rows2) {
				t.Fatalf("record %d: decoded envelope gives %v, %v; hand-built %v, %v\n%s", i, rows, err, rows2, err2, rec.Value)
			}
		}
		if rec.WantReason == "" {
			if err != nil || len(rows) != 1 {
				t.Fatalf("record %d should be valid: %v\n%s", i, err, rec.Value)
			}
			continue
		}
		c := stages.Classify(err)
		if c == nil || c.Kind != stages.KindDeadLetter || c.Reason != rec.WantReason || c.Rule != rec.WantRule {
			t.Fatalf("record %d: want %s/%q, got %+v\n%s", i, rec.WantReason, rec.WantRule, c, rec.Value)
		}
	}
}
