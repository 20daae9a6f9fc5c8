package run

import (
	"context"
	"sync"
	"testing"
	"time"
)

// doneSignal is a context whose Done reports, once, that the caller
// reached its select: the waiter checked the budget and is about to block.
type doneSignal struct {
	context.Context
	once    sync.Once
	reached chan struct{}
}

func (c *doneSignal) Done() <-chan struct{} {
	c.once.Do(func() { close(c.reached) })
	return c.Context.Done()
}

// waitForBudgetAsync runs r.waitForBudget in a goroutine; returned is
// closed when it returns, ctx.reached when it is about to block.
func waitForBudgetAsync(t *testing.T, r *Runner[string, string]) (ctx *doneSignal, returned chan struct{}) {
	ctx = &doneSignal{Context: t.Context(), reached: make(chan struct{})}
	returned = make(chan struct{})
	go func() {
		defer close(returned)
		r.waitForBudget(ctx)
	}()
	return ctx, returned
}

// TestBudgetWaitSeesAFullnessItsUpdateNeverNotified: a goroutine adds to
// the budget, filling it, and is preempted before its update; the poll
// loop sees the counters full and waits; another goroutine releases as
// much, and both updates run. The state notified never changed (not full,
// then not full), so nothing closes the channel the poll loop waits on: it
// must not have waited on a fullness that was never notified, or it polls
// never again (every later change leaves the budget not full).
func TestBudgetWaitSeesAFullnessItsUpdateNeverNotified(t *testing.T) {
	t.Parallel()
	b := NewBudget(MinBudget)
	r := &Runner[string, string]{budget: b}
	b.records.Add(b.limit) // a worker's hold, its update not run yet
	ctx, returned := waitForBudgetAsync(t, r)
	select {
	case <-returned:
		return // it polls: the fullness was never notified
	case <-ctx.reached:
	}
	b.records.Add(-b.limit) // another worker's release, and its update
	b.update()
	b.update() // the first worker's update
	if !b.pollable() {
		t.Fatal("the budget is full after the release")
	}
	select {
	case <-returned:
	case <-time.After(30 * time.Second):
		t.Fatal("the budget is not full and every update ran, yet the poll loop still waits for a state change that will never come")
	}
}

// TestBudgetWaitHoldsThePollUntilARelease: with the budget full (and
// notified so), the poll loop waits, and a release that leaves it not
// full ends the wait.
func TestBudgetWaitHoldsThePollUntilARelease(t *testing.T) {
	t.Parallel()
	b := NewBudget(MinBudget)
	r := &Runner[string, string]{budget: b}
	b.addRecords(b.limit)
	ctx, returned := waitForBudgetAsync(t, r)
	select {
	case <-returned:
		t.Fatal("the poll loop polled with the budget full")
	case <-ctx.reached:
	}
	b.addRecords(-1)
	select {
	case <-returned:
	case <-time.After(30 * time.Second):
		t.Fatal("a release left the budget not full, and the poll loop still waits")
	}
}
