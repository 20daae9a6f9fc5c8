package silver

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit"
)

// TestMergeEqualsSequentialUpserts: for random sequences of rows of a few
// keys, with every nullable column NULL or not, languages known, unknown or
// NULL, arrays NULL, empty or not and times in any order, the tables end
// the same whether each row is upserted in its own batch (the SQL of the
// Update clause applied row by row), all rows go in one batch (merged in
// memory by the sink), or the rows are first folded by the router's Merge
// (the runtime's coalescing window), on Go values or on their encodings
// (a window that holds encoded rows, run.Encoder) — every column but
// ingest_time.
func TestMergeEqualsSequentialUpserts(t *testing.T) {
	t.Parallel()
	srv := testkit.NewPostgresServer(t)
	base := time.Date(2025, 6, 1, 0, 0, 0, 0, time.UTC)
	gen := func(seed uint64) []Row {
		rng := rand.New(rand.NewPCG(seed, 42))
		maybe := func() bool { return rng.IntN(2) == 0 }
		str := func(vals ...string) *string {
			if i := rng.IntN(len(vals) + 1); i < len(vals) {
				return ptr(vals[i])
			}
			return nil
		}
		flt := func() *float64 {
			if maybe() {
				return nil
			}
			return ptr(float64(rng.IntN(5)) - 1.5)
		}
		arr := func() []string {
			switch rng.IntN(3) {
			case 0:
				return nil
			case 1:
				return []string{}
			}
			return []string{fmt.Sprintf("S%c%c", 'A'+rng.IntN(3), 'A'+rng.IntN(3))}
		}
		tm := func() time.Time { return base.Add(time.Duration(rng.IntN(48)) * time.Hour) }
		var rows []Row
		for i := 0; i < 60; i++ {
			if maybe() {
				r := &SARow{URLCanonical: fmt.Sprintf("https://a.vn/%d", rng.IntN(3)), SourceDomain: fmt.Sprintf("d%d", rng.IntN(3)),
					PublisherTime: tm(), FirstSeenTime: tm(), Language: str("vi", "en", LanguageUnknown, LanguageUnknown),
					Title: str("t1", "t2"), TextNormalized: str("x1", "x2"), ContentHash: fmt.Sprintf("h%d", rng.IntN(4)),
					Symbols: arr(), Author: str("a1", "a2"), TopicTags: arr(), HypeRaw: flt(), HypeCrowd: flt(), HypeElitist: flt()}
				if !maybe() {
					r.AccountWeightsApplied = ptr(maybe())
				}
				rows = append(rows, Row{SA: r})
				continue
			}
			r := &TARow{Symbol: []string{"VNM", "FPT"}[rng.IntN(2)], TradeDate: base, Open: float64(rng.IntN(9)), High: 10, Low: 0,
				Close: float64(rng.IntN(9)), Volume: int64(rng.IntN(100)), VWAP: flt(), AdjClose: flt(),
				Currency: []string{"VND", "USD"}[rng.IntN(2)], PriceMultiplier: float64(1 + rng.IntN(2)),
				Source: str("hose", "hnx"), ContentHash: str("c1", "c2")}
			if maybe() {
				r.FirstSeenTime = tm()
			}
			rows = append(rows, Row{TA: r})
		}
		return rows
	}
	for seed := uint64(1); seed <= 8; seed++ {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) {
			t.Parallel()
			ctxA, a := migrated(t, srv)
			_, b := migrated(t, srv)
			_, c := migrated(t, srv)
			_, d := migrated(t, srv)
			sinkA, sinkB, sinkC, sinkD := newSink(t, a.Pool), newSink(t, b.Pool), newSink(t, c.Pool), newSink(t, d.Pool)
			for _, r := range gen(seed) {
				if err := sinkA.Write(ctxA, []Row{r}); err != nil {
					t.Fatal(err)
				}
			}
			if err := sinkB.Write(ctxA, gen(seed)); err != nil {
				t.Fatal(err)
			}
			rt := sinkC.(*router)
			window := map[string]Row{}
			var order []string
			for _, r := range gen(seed) {
				k := rt.MergeKey(r)
				if old, ok := window[k]; ok {
					window[k] = rt.Merge(old, r)
					continue
				}
				window[k] = r
				order = append(order, k)
			}
			var merged []Row
			for _, k := range order {
				merged = append(merged, window[k])
			}
			if err := sinkC.Write(ctxA, merged); err != nil {
				t.Fatal(err)
			}
			encoded := map[string][]byte{}
			merged = merged[:0]
			for _, r := range gen(seed) {
				k := rt.MergeKey(r)
				old, ok := encoded[k]
				if ok {
					prev, err := rt.Decode(old)
					if err != nil {
						t.Fatal(err)
					}
					r = rt.Merge(prev, r)
				}
				encoded[k] = rt.AppendEncoded(old[:0], r)
			}
			for _, k := range order {
				r, err := rt.Decode(encoded[k])
				if err != nil {
					t.Fatal(err)
				}
				merged = append(merged, r)
			}
			if err := sinkD.Write(ctxA, merged); err != nil {
				t.Fatal(err)
			}
			seqTA, seqSA := withoutIngest(readTA(t, ctxA, a.Pool), clearTA), withoutIngest(readSA(t, ctxA, a.Pool), clearSA)
			for name, db := range map[string]*testkit.Postgres{"one batch": b, "window then batch": c, "encoded window then batch": d} {
				gotTA, gotSA := withoutIngest(readTA(t, ctxA, db.Pool), clearTA), withoutIngest(readSA(t, ctxA, db.Pool), clearSA)
				if !reflect.DeepEqual(gotTA, seqTA) {
					t.Errorf("%s: ta_silver =\n%+v\nrow by row\n%+v", name, gotTA, seqTA)
				}
				if !reflect.DeepEqual(gotSA, seqSA) {
					for k := range seqSA {
						if !reflect.DeepEqual(gotSA[k], seqSA[k]) {
							t.Errorf("%s: sa_silver %s =\n%+v\nrow by row\n%+v", name, k, gotSA[k], seqSA[k])
						}
					}
				}
			}
		})
	}
}
