package run_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/stages"
	"github.com/sluicehq/sluice/stages/run"
)

// encTallySink is tallySink holding its outputs encoded, its key read back
// from the encoding (run.EncodedKeyer).
type encTallySink struct{ *tallySink }

func (encTallySink) AppendEncoded(dst []byte, t tally) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(t.Key)))
	dst = append(dst, t.Key...)
	dst = binary.AppendUvarint(dst, uint64(t.Count))
	return append(dst, t.Last...)
}

func (encTallySink) Decode(b []byte) (tally, error) {
	n, w := binary.Uvarint(b)
	if w <= 0 || uint64(len(b)-w) < n {
		return tally{}, errors.New("corrupt tally")
	}
	k := string(b[w : w+int(n)])
	b = b[w+int(n):]
	c, w := binary.Uvarint(b)
	if w <= 0 {
		return tally{}, errors.New("corrupt tally")
	}
	return tally{Key: k, Count: int(c), Last: string(b[w:])}, nil
}

func (encTallySink) AppendEncodedKey(dst, enc []byte) ([]byte, error) {
	n, w := binary.Uvarint(enc)
	if w <= 0 || uint64(len(enc)-w) < n {
		return dst, errors.New("corrupt tally")
	}
	return append(dst, enc[w:w+int(n)]...), nil
}

// Records behind outputs of several keys, at offsets with holes (the
// commit markers and aborted records of a transactional producer), in an
// encoded window written in parts of 1 MiB (and closed early for the
// memory budget): the sink fails the first Writes transiently, then
// rejects one key's merged output, and exactly the records behind it are
// dead-lettered, once each, while every other output is written once
// with all its records and every record's offset is committed.
func TestEncodedWindowRejectsRecordsBehindSeveralKeys(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{run.DLQTransactional, run.DLQAtLeastOnce} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			k := testkit.NewKafka(t, testkit.FakeOK())
			cfg := baseConfig(t, k, 1)
			cfg.DLQCommit = mode
			cfg.Window = run.WindowConfig{MaxKeys: 100_000, MaxAge: time.Minute}
			topic := cfg.Topics[0]
			ctx := testkit.Context(t)
			txc := k.Client(t, kgo.TransactionalID(testkit.Name(t, "txn")), kgo.DefaultProduceTopic(topic))
			const n = 900
			var committed []int // values of the committed records
			lastOff := int64(0) // offset after the last committed record
			for i := 0; i < n; {
				if err := txc.BeginTransaction(); err != nil {
					t.Fatal(err)
				}
				abort := i%7 == 3
				var recs []*kgo.Record
				for j := 0; j < 1+i%3 && i < n; j++ {
					recs = append(recs, &kgo.Record{Value: []byte(strconv.Itoa(i))})
					if !abort {
						committed = append(committed, i)
					}
					i++
				}
				if err := txc.ProduceSync(ctx, recs...).FirstErr(); err != nil {
					t.Fatal(err)
				}
				if !abort {
					lastOff = recs[len(recs)-1].Offset + 1
				}
				end := kgo.TryCommit
				if abort {
					end = kgo.TryAbort
				}
				if err := txc.EndTransaction(ctx, end); err != nil {
					t.Fatal(err)
				}
			}
			// Each record: its own key (a large value: the window is
			// written in parts), and a group key of three; group g-1 is
			// refused by the sink.
			big := strings.Repeat("x", 8<<10)
			stage := func(_ context.Context, m msg) ([]tally, error) {
				i, _ := strconv.Atoi(m.Value)
				g := fmt.Sprintf("g-%d", i%3)
				own := tally{Key: "r-" + m.Value, Count: 1, Last: big}
				if i%2 == 0 { // the group key first, or after the record's own
					return []tally{{Key: g, Count: 1, Last: m.Value}, own, {Key: g, Count: 1, Last: m.Value}}, nil
				}
				return []tally{own, {Key: g, Count: 1, Last: m.Value}, {Key: g, Count: 1, Last: m.Value}}, nil
			}
			sink := &tallySink{state: map[string]tally{}, reject: "g-1", fails: 3} // parts retried after transient failures
			adm := k.Admin(t)
			_, stop := start(t, k, cfg, stage, stages.Sink[tally](encTallySink{sink}),
				run.WithKafkaOpts(kgo.SeedBrokers(k.Brokers...), kgo.FetchMaxWait(200*time.Millisecond), kgo.FetchIsolationLevel(kgo.ReadCommitted())),
				run.WithBudget(run.NewBudget(16<<20))) // parts of 1 MiB, budget closes
			testkit.WaitFor(t, 60*time.Second, "commit of every record", func() bool {
				return sum(testkit.Committed(t, adm, cfg.Group, topic)) >= lastOff
			})
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			st, writes := sink.snapshot()
			counts := map[int]int{}
			for _, v := range committed {
				counts[v%3]++
			}
			for g, want := range map[string]int{"g-0": 2 * counts[0], "g-2": 2 * counts[2]} {
				if st[g].Count != want {
					t.Errorf("%s holds %d outputs, want %d", g, st[g].Count, want)
				}
			}
			for _, v := range committed {
				if r := st["r-"+strconv.Itoa(v)]; r.Count != 1 || r.Last != big {
					t.Fatalf("key r-%d: count %d, %d bytes", v, r.Count, len(r.Last))
				}
			}
			if len(writes) < 2 {
				t.Errorf("%d writes: the window was not written in parts", len(writes))
			}
			dlq := k.ReadTopic(t, cfg.DLQTopic, testkit.ReadCommitted())
			seen := map[string]int{}
			for _, d := range dlq {
				seen[string(d.Value)]++
				if r, _ := testkit.Header(d, stages.HeaderRule); r != "test.refused" {
					t.Errorf("dead letter %q: rule %q", d.Value, r)
				}
			}
			want := 0
			for _, v := range committed {
				if v%3 == 1 {
					want++
					if seen[strconv.Itoa(v)] != 1 {
						t.Errorf("record %d dead-lettered %d times, want once", v, seen[strconv.Itoa(v)])
					}
				}
			}
			if len(dlq) != want {
				t.Errorf("%d dead letters, want %d", len(dlq), want)
			}
		})
	}
}
