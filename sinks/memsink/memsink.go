// Package memsink is an in-memory [stages.Sink] for tests, examples and
// benchmarks. It keeps every written item in write order and can inject
// failures. It is safe for concurrent use.
package memsink

import (
	"context"
	"errors"
	"sync"

	"github.com/sluicehq/sluice/stages"
)

// Sink stores written items in memory.
type Sink[T any] struct {
	mu     sync.Mutex
	items  []T
	count  int
	writes int
	keep   bool
	fail   func(batch []T, write int) error
}

// Option configures a Sink.
type Option[T any] func(*Sink[T])

// WithFailure installs a failure injector: fn is called before each write
// with the batch and the 1-based write number. A non-nil error is returned
// from Write; a *stages.Rejections error still stores every item except the
// rejected ones, any other error stores nothing.
func WithFailure[T any](fn func(batch []T, write int) error) Option[T] {
	return func(s *Sink[T]) { s.fail = fn }
}

// CountOnly makes the sink count items without keeping them (benchmarks).
func CountOnly[T any]() Option[T] { return func(s *Sink[T]) { s.keep = false } }

// New returns an empty sink.
func New[T any](opts ...Option[T]) *Sink[T] {
	s := &Sink[T]{keep: true}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Write implements [stages.Sink].
func (s *Sink[T]) Write(_ context.Context, batch []T) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.writes++
	var skip map[int]bool
	if s.fail != nil {
		if err := s.fail(batch, s.writes); err != nil {
			var rej *stages.Rejections
			if !errors.As(err, &rej) {
				return err
			}
			skip = make(map[int]bool, len(rej.Items))
			for _, it := range rej.Items {
				skip[it.Index] = true
			}
			s.store(batch, skip)
			return err
		}
	}
	s.store(batch, nil)
	return nil
}

func (s *Sink[T]) store(batch []T, skip map[int]bool) {
	for i, it := range batch {
		if skip[i] {
			continue
		}
		s.count++
		if s.keep {
			s.items = append(s.items, it)
		}
	}
}

// Items returns a copy of the stored items in write order.
func (s *Sink[T]) Items() []T {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]T(nil), s.items...)
}

// Len returns the number of items written (also in CountOnly mode).
func (s *Sink[T]) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.count
}

// Writes returns how many times Write was called.
func (s *Sink[T]) Writes() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.writes
}
