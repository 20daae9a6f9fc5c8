package pgsink_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/sinks/pgsink"
)

// A batch whose keys are distinct (the output of a coalescing window, which
// the runtime already merged) is not merged again: Merge runs only for the
// second and later items of a key, in batch order, so a row merged on the
// Go side is merged once. The rows land as the Update clause says either
// way.
func TestSinkMergesOnlyRepeatedKeys(t *testing.T) {
	t.Parallel()
	srv := testkit.NewPostgresServer(t)
	eachPath(t, func(t *testing.T, path writePath) {
		pg := srv.Postgres(t)
		ctx := testkit.Context(t)
		if _, err := pg.Pool.Exec(ctx, itemsDDL); err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		var merges []string // "old.note>next.note"
		table := itemsTable("items")
		merge := table.Merge
		table.Merge = func(old, next item) item {
			mu.Lock()
			merges = append(merges, fmt.Sprintf("%s>%s", *old.Note, *next.Note))
			mu.Unlock()
			return merge(old, next)
		}
		reg := prometheus.NewRegistry()
		s, err := pgsink.New(pg.Pool, table, path.opt, pgsink.WithRegisterer(reg, "test"))
		if err != nil {
			t.Fatal(err)
		}
		var distinct []item
		for i := range 200 {
			distinct = append(distinct, item{K: fmt.Sprintf("k%03d", 199-i), V: 1, N: n32(int32(i)), Note: str(fmt.Sprint(i))})
		}
		if err := s.Write(ctx, distinct); err != nil {
			t.Fatal(err)
		}
		if len(merges) != 0 {
			t.Fatalf("%d merges in a batch of distinct keys: %v", len(merges), merges)
		}
		if got := readItems(t, ctx, pg.Pool); len(got) != 200 || got["k000"].N != 199 {
			t.Fatalf("%d rows, k000 = %v", len(got), got["k000"])
		}
		batch := []item{
			{K: "k001", V: 2, N: n32(1), Note: str("a")},
			{K: "x", V: 1, N: n32(1), Note: str("x")},
			{K: "k001", V: 3, N: n32(500), Note: str("b")},
			{K: "k001", V: 4, N: n32(2), Note: str("c")},
		}
		if err := s.Write(ctx, batch); err != nil {
			t.Fatal(err)
		}
		if want := []string{"a>b", "b>c"}; fmt.Sprint(merges) != fmt.Sprint(want) {
			t.Errorf("merges %v, want %v (the repeated key's items, in batch order)", merges, want)
		}
		got := readItems(t, ctx, pg.Pool)
		if k := got["k001"]; k.V != 4 || k.N != 500 || *k.Note != "c" {
			t.Errorf("k001 = %v, want v=4 n=500 note=c", k)
		}
		if v := testkit.Metric(t, reg, "sluice_pgsink_rows_merged_total"); v != 2 {
			t.Errorf("sluice_pgsink_rows_merged_total = %v, want 2", v)
		}
	})
}
