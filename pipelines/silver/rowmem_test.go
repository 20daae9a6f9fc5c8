package silver

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/stages"
)

// The rows of one stage, called from several goroutines at once (as the
// runtime's partition workers do) on records of which many fail a rule,
// keep their values while later rows are built: each row equals the copy
// taken (encoded) right after it was made, once every goroutine is done.
// Arrays and texts larger than the shared chunks, and empty arrays, are
// among them.
func TestRowsKeepTheirMemory(t *testing.T) {
	t.Parallel()
	stage := Stage(WithClock(func() time.Time { return time.Date(2025, 6, 10, 12, 0, 0, 0, time.UTC) }))
	var rt router
	big := map[string]any{
		"symbols":         strings.Split(strings.Repeat("VNM,FPT,", 20)+"HPG", ","),
		"topic_tags":      []string{},
		"text_normalized": strings.Repeat("Thị trường ", 600),
	}
	extra := [][]byte{envelope(t, TaskSA, saBase(), big, nil), envelope(t, TaskSA, saBase(), map[string]any{"topic_tags": make([]string, 40)}, nil)}
	const workers = 4
	got := make([][]keptRow, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			recs := GenerateCorpus(int64(20+w), 3000, 0.3)
			for i, rec := range recs {
				value := rec.Value
				if i%97 == 0 {
					value = extra[i%2]
				}
				env, err := Decode([]byte(rec.Key), value)
				if err != nil {
					continue
				}
				rows, err := stage(context.Background(), stages.Msg[Envelope]{Value: env})
				if err != nil {
					continue
				}
				got[w] = append(got[w], keptRow{rows[0], rt.AppendEncoded(nil, rows[0])})
			}
		}()
	}
	wg.Wait()
	if n := checkKeptRows(t, got); n < workers*1500 {
		t.Fatalf("only %d rows", n)
	}
}

// A valid record costs the stage no allocation of its own: its row, arrays
// and text are carved from chunks shared with the next rows.
func TestRowsShareChunks(t *testing.T) {
	v := NewValidator(WithClock(testClock))
	for _, task := range []string{TaskTA, TaskSA} {
		base := taBase()
		if task == TaskSA {
			base = saBase()
			base["topic_tags"] = []string{"thi-truong", "vi-mo"}
			base["title"] = "Bản tin"
		}
		env, err := Decode(nil, envelope(t, task, base, nil, nil))
		if err != nil {
			t.Fatal(err)
		}
		mem := &rowMemory{}
		rows := 0
		allocs := testing.AllocsPerRun(rowChunk*4, func() {
			var p payload
			if err := p.index(&env); err != nil {
				t.Fatal(err)
			}
			var out []Row
			if task == TaskTA {
				out, err = v.transformTA(&p, &env, time.Time{}, mem)
			} else {
				out, err = v.transformSA(&p, &env, mem)
			}
			if err != nil {
				t.Fatal(err)
			}
			rows += len(out)
		})
		if allocs != 0 || rows == 0 {
			t.Errorf("%s: %v allocations per row (%d rows), want less than one", task, allocs, rows)
		}
	}
}

// Decode's rows refer to none of the encoding's memory (the window reuses
// it) and keep their values while later rows are decoded: each decoded
// row equals the row encoded, once all are decoded and their encodings
// overwritten.
func TestDecodedRowsKeepTheirMemory(t *testing.T) {
	t.Parallel()
	var rt router
	rows := corpusRows(t, 23, 2000, 300)
	rows = append(rows, Row{SA: &SARow{URLCanonical: "https://e.x/big", Symbols: make([]string, 40), TopicTags: []string{},
		TextNormalized: new(strings.Repeat("ệ", 3000))}})
	decoded := make([]Row, len(rows))
	buf := make([]byte, 0, 1<<16)
	for i, row := range rows {
		buf = rt.AppendEncoded(buf[:0], row)
		d, err := rt.Decode(buf)
		if err != nil {
			t.Fatal(err)
		}
		decoded[i] = d
		scribble(buf)
	}
	for i := range rows {
		if d := sameRow(decoded[i], rows[i]); d != "" {
			t.Fatalf("row %d: decoded %s differs", i, d)
		}
	}
}

// An empty array ('{}') stays empty, not NULL, when AppendMerged keeps
// the old row's, also as the first merge of a router (its pooled memory
// fresh).
func TestAppendMergedKeepsEmptyArrays(t *testing.T) {
	t.Parallel()
	for _, oldSyms := range [][]string{{}, nil, {"VNM"}} {
		old := Row{SA: &SARow{URLCanonical: "https://e.x/a", Symbols: oldSyms, TopicTags: []string{}}}
		next := Row{SA: &SARow{URLCanonical: "https://e.x/a", ContentHash: "h"}}
		var rt router
		enc := rt.AppendEncoded(nil, old)
		got, err := rt.AppendMerged(nil, enc, next)
		if err != nil {
			t.Fatal(err)
		}
		var ref router
		o, err := ref.Decode(enc)
		if err != nil {
			t.Fatal(err)
		}
		if want := ref.AppendEncoded(nil, ref.Merge(o, next)); string(got) != string(want) {
			t.Errorf("old symbols %#v: AppendMerged %q, want %q", oldSyms, got, want)
		}
	}
}
