package progress

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sluicehq/sluice/stages"
)

// Item identifies one processed item in an input record.
type Item struct {
	Job    string // job id, e.g. a project id
	ID     string // item id, unique within the job
	Failed bool   // the item's processing failed (counts in errors too)
}

// Completion asks the sink to publish the completion of a job.
type Completion struct {
	State
	// Repeat: an earlier decision for this job was never marked done, so
	// the completion may have been published before (same event id).
	Repeat bool
}

// Stage returns a stage that counts the item of every input record with t
// and outputs a Completion when the count decides (or re-decides) the job's
// completion. item extracts the item; its error dead-letters the record
// (the caller classifies it, e.g. stages.DeadLetter); an item that the
// tracker refuses (ErrInvalidID: an empty item id, or a job id that
// CheckJobID refuses) is dead-lettered as sanity_fail. A job without state
// (ErrMissing) is retried after missingWait (≥ 0), like a Redis failure, so
// that an operator can rebuild the state meanwhile; the runner's retry
// policy bounds the attempts.
func Stage[In any](t *Tracker, item func(stages.Msg[In]) (Item, error), missingWait time.Duration) stages.Func[In, Completion] {
	return func(ctx context.Context, m stages.Msg[In]) ([]Completion, error) {
		it, err := item(m)
		if err != nil {
			return nil, err
		}
		d, err := t.Count(ctx, it.Job, it.ID, it.Failed)
		if errors.Is(err, ErrInvalidID) {
			return nil, stages.DeadLetter(stages.ReasonSanityFail, "", err)
		}
		if errors.Is(err, ErrMissing) {
			return nil, stages.RetryAfter(missingWait, err)
		}
		if err != nil {
			return nil, stages.Retry(err)
		}
		if !d.Publish {
			return nil, nil
		}
		return []Completion{{State: d.State, Repeat: d.Repeat}}, nil
	}
}

// Sink publishes completions and marks them done. Write de-duplicates the
// batch by job, calls publish with the remaining completions (in first-seen
// order) and, only when publish returned nil (every event acknowledged),
// calls MarkDone for each job, then the WithAfterDone hook. A publish,
// MarkDone or hook failure is returned as a transient error: the runtime
// retries the batch, so the completion may be published again with the
// same event id, never lost. The retries of this Sink resume where the
// failed attempt stopped: a job it published is not published again, a job
// it marked done is not marked again (only the hook runs again). Another
// process that gets the record (a crash, a revoke) publishes it again.
// Safe for concurrent use.
type Sink struct {
	t         *Tracker
	publish   func(ctx context.Context, cs []Completion) error
	afterDone func(ctx context.Context, cs []Completion) error

	mu        sync.Mutex
	published map[string]bool       // jobs published (acknowledged), not yet marked done
	marked    map[string]Completion // jobs marked done whose hook has not succeeded yet
}

// SinkOption configures a Sink.
type SinkOption func(*Sink)

// WithAfterDone sets a hook called after MarkDone with the completed jobs
// (e.g. to record the completion in a database or an object). Its error
// fails the batch, which the runtime retries; the retry calls the hook
// again for the same jobs without publishing or marking them again, so the
// hook must be idempotent.
func WithAfterDone(fn func(ctx context.Context, cs []Completion) error) SinkOption {
	return func(s *Sink) { s.afterDone = fn }
}

// NewSink returns a completion sink; publish must return only after every
// completion is durable (e.g. acknowledged by the broker).
func NewSink(t *Tracker, publish func(ctx context.Context, cs []Completion) error, opts ...SinkOption) *Sink {
	s := &Sink{t: t, publish: publish, published: map[string]bool{}, marked: map[string]Completion{}}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Write implements stages.Sink.
func (s *Sink) Write(ctx context.Context, batch []Completion) error {
	seen := make(map[string]bool, len(batch))
	cs := make([]Completion, 0, len(batch))
	for _, c := range batch {
		if seen[c.ID] {
			continue
		}
		seen[c.ID] = true
		cs = append(cs, c)
	}
	if len(cs) == 0 {
		return nil
	}
	s.mu.Lock()
	unpublished := make([]Completion, 0, len(cs))
	for i, c := range cs {
		if m, ok := s.marked[c.ID]; ok {
			cs[i] = m // done: only its hook is left
			continue
		}
		if !s.published[c.ID] {
			unpublished = append(unpublished, c)
		}
	}
	s.mu.Unlock()
	if len(unpublished) > 0 {
		if err := s.publish(ctx, unpublished); err != nil {
			return fmt.Errorf("progress: publish %d completion(s): %w", len(unpublished), err)
		}
		s.mu.Lock()
		for _, c := range unpublished {
			s.published[c.ID] = true
		}
		s.mu.Unlock()
	}
	for i, c := range cs {
		s.mu.Lock()
		_, done := s.marked[c.ID]
		s.mu.Unlock()
		if done {
			continue
		}
		st, err := s.t.MarkDone(ctx, c.ID)
		if err != nil && !errors.Is(err, ErrMissing) {
			return fmt.Errorf("progress: mark %s done: %w", c.ID, err)
		}
		if err == nil {
			cs[i].State = st
		}
		s.mu.Lock()
		delete(s.published, c.ID)
		if s.afterDone != nil {
			s.marked[c.ID] = cs[i]
		}
		s.mu.Unlock()
	}
	if s.afterDone == nil {
		return nil
	}
	if err := s.afterDone(ctx, cs); err != nil {
		return fmt.Errorf("progress: after marking %d completion(s) done: %w", len(cs), err)
	}
	s.mu.Lock()
	for _, c := range cs {
		delete(s.marked, c.ID)
	}
	s.mu.Unlock()
	return nil
}
