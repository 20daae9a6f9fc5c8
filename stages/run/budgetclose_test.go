package run

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kgo"
)

// fillWindow adds n outputs of distinct keys (prefix) with values of size
// bytes to w's window.
func fillWindow(t *testing.T, w *worker[string, kv], prefix string, n, size int) {
	t.Helper()
	batch := make([]*kgo.Record, n)
	p := &pending[kv]{}
	for i := range batch {
		batch[i] = &kgo.Record{Offset: int64(i)}
		p.outs = append(p.outs, kv{fmt.Sprintf("%s%05d", prefix, i), strings.Repeat("x", size)})
		p.owners = append(p.owners, i)
	}
	if _, err := w.win.add(batch, p); err != nil {
		t.Fatal(err)
	}
}

// Under budget pressure the runner's largest windows are closed early, not
// whichever worker looks first: a window of less than half the largest
// open one stays open (it merged few records, and writing it would free
// little), unless its worker waited long enough (force); one being written
// no longer counts as the largest; without pressure none closes. Each
// early close counts in sluice_window_budget_closes_total.
func TestBudgetClosesLargestWindows(t *testing.T) {
	t.Parallel()
	r := &Runner[string, kv]{budget: NewBudget(MinBudget), workers: map[tp]*worker[string, kv]{},
		budgetCloses: prometheus.NewCounter(prometheus.CounterOpts{Name: "closes"})}
	r.mem = &heldBytes{b: r.budget}
	var keys atomic.Int64
	newW := func(p int32) *worker[string, kv] {
		w := &worker[string, kv]{r: r, tp: tp{"t", p}, win: newWindow[kv](kvMerger{}, &keys, r.mem)}
		r.workers[w.tp] = w
		return w
	}
	big, mid, small := newW(0), newW(1), newW(2)
	fillWindow(t, big, "b", 2000, 400)
	fillWindow(t, mid, "m", 1300, 400) // 0.65 × big: above half of it whatever the arena's chunk rounding
	fillWindow(t, small, "s", 50, 400)
	if big.budgetClose(false) || small.budgetClose(true) {
		t.Fatal("a window closed early without budget pressure")
	}
	r.mem.addRecords(r.budget.Limit()) // the budget is full
	if !r.budget.pressure() {
		t.Fatal("no budget pressure with the budget full")
	}
	if small.budgetClose(false) {
		t.Error("the smallest window was closed early while larger ones are open")
	}
	if !big.budgetClose(false) || !mid.budgetClose(false) {
		t.Error("a window of at least half the largest was not closed under pressure")
	}
	if !small.budgetClose(true) {
		t.Error("a small window whose worker waited (force) was not closed under pressure")
	}
	big.win.open.Store(0) // being written
	mid.win.open.Store(0)
	if !small.budgetClose(false) {
		t.Error("the largest window not being written was not closed under pressure")
	}
	if got := testutil.ToFloat64(r.budgetCloses); got != 4 {
		t.Errorf("sluice_window_budget_closes_total = %v, want 4", got)
	}
}
