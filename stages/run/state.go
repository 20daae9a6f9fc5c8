package run

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/stages"
)

// StoreConfig declares a keyed state store (see [Store]).
type StoreConfig[V any] struct {
	// Name identifies the store in metrics (label store), logs and errors;
	// unique among a runner's stores. Required.
	Name string
	// Topic is the store's changelog: a compacted topic with as many
	// partitions as the runner's input topic. Partition p of the changelog
	// holds the state of the records of input partition p. Required. Only
	// the runtime writes it (an operator's tombstone aside), without
	// transactions: a restore reads up to the end offset it lists first,
	// and a trailing transaction marker would keep it waiting.
	Topic string
	// Encode and Decode convert values to and from changelog record values.
	// Required. Decode must accept what Encode produced; a record Decode
	// refuses is skipped by a restore (counted in
	// sluice_state_restore_skipped_total).
	Encode func(V) ([]byte, error)
	Decode func([]byte) (V, error)
	// Fold decides during a restore, for a key that already has an entry
	// cur, whether next (a later record of the key in the changelog)
	// replaces it. nil: every record replaces the earlier one, so the last
	// record of a key is its state, as compaction keeps it. [KeepGreatest]
	// keeps the entry with the greatest fencing token instead. Records a
	// restore refuses as a zombie's (see [Token]) never reach Fold.
	Fold func(cur, next Entry[V]) bool
	// Group, when set, names the group of a key: a prefix of it such that
	// every key starting with that prefix is in the same group (e.g.
	// "T|user|" for "T|user|trade"), or "" for none. Each partition then
	// keeps the keys of every group, and a Range whose prefix is a group's
	// name (Group(prefix) == prefix) visits that group's keys instead of
	// every key of the partition — a store of many keys read a group at a
	// time needs it. nil: Range scans every key.
	Group func(key string) string
	// EncodeAtFlush defers Put's encoding to the key's changelog record:
	// Put stores the value only, and the flush encodes the latest value of
	// each key it writes, once (an encoding error then stops the runner:
	// state cannot be skipped). For a store whose keys change many times
	// between flushes (see WithStateFlushEvery) and whose Encode cannot
	// fail; the value Put must then not change until its flush. false:
	// Put encodes at once and returns Encode's error.
	EncodeAtFlush bool
}

// Entry is one changelog record of a key, as a restore's Fold sees it.
type Entry[V any] struct {
	Key     string
	Value   V    // the zero value for a tombstone
	Deleted bool // a tombstone (the record's value is null)
	// Token is the record's fencing token; Tokened is false for a record
	// not written by a Store (no token headers: an operator's tombstone,
	// a record written by hand), whose Token is zero.
	Token   Token
	Tokened bool
	Offset  int64
}

// KeepGreatest is a Fold that keeps, per key, the entry with the greatest
// fencing token (a tombstone included), not the last record in the log:
// a late record of an earlier owner never replaces a later owner's. A
// record without a token (not written by a Store) replaces the current
// entry, and is replaced by the next record, in log order. It chooses only
// among the records a restore reads: once compaction removed a later
// owner's record of a key because an earlier owner's late record of the key
// follows it, that record is gone (see [Token]).
func KeepGreatest[V any](cur, next Entry[V]) bool {
	if !cur.Tokened || !next.Tokened {
		return true
	}
	return !next.Token.Less(cur.Token)
}

// Store is a keyed state store kept by the runtime, per partition of the
// runner's input topic, and backed by a compacted changelog topic
// co-partitioned with it. Declare it with [NewStore] and hand it to one
// runner with [WithStores]; a stage reaches its partition's part with
// [Store.Of].
//
// Contract:
//   - Restore: when a partition is assigned, its worker reads partition p
//     of the changelog from the start to its end before it processes any
//     record of the partition (Runner.Ready is false meanwhile; gauge
//     sluice_state_restoring). Records an earlier owner wrote after a later
//     one's are refused (see [Token]); StoreConfig.Fold chooses among the
//     rest. A failed read (offsets or fetch) is retried after
//     Config.SinkRetry's backoff until it succeeds or the worker stops
//     (logged, and counted in sluice_runtime_errors_total{kind="restore"});
//     only a changelog without the partition stops the runner.
//   - Writes: Put and Delete change the partition's store at once (a later
//     Get of the same batch sees them) and mark the key. When the worker
//     makes a batch durable it writes the sink's outputs, produces the
//     dead letters, then produces one changelog record per marked key (its
//     latest value, or a tombstone) and waits for the broker's
//     acknowledgement, and only then marks the batch's offsets: a committed
//     offset's state is in the changelog, and state is never ahead of the
//     outputs it stands for (with coalescing windows, the window's write
//     comes first). [Partition.PutNow] writes one key at once instead,
//     ahead of the batch's outputs. A crash can leave state ahead of the
//     committed offset (at-least-once): the records after the commit are
//     processed again against it, so a stage must be idempotent with
//     respect to its own state (record the offset it applied, say).
//   - Failures: writes are not rolled back when the stage then fails: a
//     record retried, dead-lettered, or left at a stop or a fatal error
//     keeps the writes made before its error, and they are produced with
//     the batch.
//   - A worker the runtime abandoned, or whose partition was lost, produces
//     no changelog record after it was abandoned or lost (a produce already
//     in flight may still land; sluice_state_fenced_total{where="write"}).
//
// Values are held decoded in memory; Get returns the stored value, so a
// value with pointers or slices must be treated as immutable (Put a new
// one).
type Store[V any] struct {
	cfg   StoreConfig[V]
	bound atomic.Bool
}

// NewStore validates cfg and declares a store.
func NewStore[V any](cfg StoreConfig[V]) (*Store[V], error) {
	var errs []error
	if cfg.Name == "" {
		errs = append(errs, errors.New("a store name is required"))
	}
	if cfg.Topic == "" {
		errs = append(errs, errors.New("a changelog topic is required"))
	}
	if cfg.Encode == nil || cfg.Decode == nil {
		errs = append(errs, errors.New("Encode and Decode are required"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("state store %q: %w", cfg.Name, err)
	}
	return &Store[V]{cfg: cfg}, nil
}

// Name returns the store's name.
func (s *Store[V]) Name() string { return s.cfg.Name }

// Topic returns the store's changelog topic.
func (s *Store[V]) Topic() string { return s.cfg.Topic }

// ErrNoStore is returned (wrapped, and classified fatal) by [Store.Of]
// for a context that carries no partition of the store.
var ErrNoStore = errors.New("context carries no partition of this state store")

// ErrPartitionClosed is returned by a [Partition]'s writes after its
// worker stopped: the partition was revoked or lost, or the runner
// stopped.
var ErrPartitionClosed = errors.New("state store partition is closed (its partition was revoked or lost)")

// Of returns the store's partition for the record or timer a stage is
// called with: ctx is the context the runner passes to the stage or timer
// function. The error (fatal: see [stages.Fatal]) says ctx is not from a
// worker of the runner the store was given to.
func (s *Store[V]) Of(ctx context.Context) (*Partition[V], error) {
	if ps, ok := ctx.Value(stateKey{}).(*partitionState); ok {
		if p, ok := ps.byStore[s].(*Partition[V]); ok {
			return p, nil
		}
	}
	return nil, stages.Fatal(fmt.Errorf("state store %s: %w (use the context the runner passes to the stage, and give the store to the runner with run.WithStores)", s.cfg.Name, ErrNoStore))
}

// StateStore is a store declaration that [WithStores] accepts; *[Store]
// implements it.
type StateStore interface {
	Name() string
	Topic() string
	bind() error
	newPartition(tp tp, timers bool, now produceFunc) partStore
}

// produceFunc produces changelog records at once and waits for their
// acknowledgement (the worker's produceChangelog).
type produceFunc func(recs []*kgo.Record) error

func (s *Store[V]) bind() error {
	if !s.bound.CompareAndSwap(false, true) {
		return fmt.Errorf("state store %s is already used by another runner", s.cfg.Name)
	}
	return nil
}

func (s *Store[V]) newPartition(k tp, timers bool, now produceFunc) partStore {
	return &Partition[V]{s: s, tp: k, m: map[string]*entry[V]{}, dirty: map[string]struct{}{}, timersOn: timers, produceNow: now,
		groups: map[string]map[string]struct{}{}}
}

// entry is one key of a partition's store.
type entry[V any] struct {
	val     V
	raw     []byte // encoded val until produced (nil: encode at flush)
	deleted bool   // a tombstone: kept until produced (and during a restore, for Fold)
	tok     Token
	tokened bool
	timer   int64 // Unix ms of the key's one-shot timer; 0: none
	tries   int   // failed calls of the firing of timer (a retried firing); not in the changelog
	off     int64 // changelog offset (restore only)
}

func (e *entry[V]) asEntry(key string) Entry[V] {
	return Entry[V]{Key: key, Value: e.val, Deleted: e.deleted, Token: e.tok, Tokened: e.tokened, Offset: e.off}
}

// Partition is one partition of a [Store], as the stage of that partition
// sees it. Its worker calls the stage and the timers of the partition one
// at a time, so a stage needs no locking of its own; the methods are
// nevertheless safe for concurrent use.
type Partition[V any] struct {
	s          *Store[V]
	tp         tp
	timersOn   bool
	produceNow produceFunc // nil outside a runner

	mu     sync.Mutex
	m      map[string]*entry[V]
	dirty  map[string]struct{}
	epoch  int32
	seq    int64 // the greatest version written or restored
	floor  int32 // the greatest epoch read by the restore so far
	timers timerHeap
	closed bool
	groups map[string]map[string]struct{} // StoreConfig.Group's name → its keys in m
}

// add sets m[key] to e and indexes key under its group; p.mu is held.
func (p *Partition[V]) add(key string, e *entry[V]) {
	_, known := p.m[key]
	p.m[key] = e
	if known || p.s.cfg.Group == nil {
		return
	}
	if g := p.s.cfg.Group(key); g != "" {
		if p.groups[g] == nil {
			p.groups[g] = map[string]struct{}{}
		}
		p.groups[g][key] = struct{}{}
	}
}

// remove deletes key from m and from its group; p.mu is held.
func (p *Partition[V]) remove(key string) {
	delete(p.m, key)
	if p.s.cfg.Group != nil {
		g := p.s.cfg.Group(key)
		if ks := p.groups[g]; ks != nil {
			delete(ks, key)
			if len(ks) == 0 {
				delete(p.groups, g)
			}
		}
	}
}

// Partition returns the partition number (of the input topic and of the
// changelog).
func (p *Partition[V]) Partition() int32 { return p.tp.partition }

// Get returns the value of key and whether it has one.
func (p *Partition[V]) Get(key string) (V, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	e, ok := p.m[key]
	if !ok || e.deleted {
		var zero V
		return zero, false
	}
	return e.val, true
}

// Len returns the number of keys with a value.
func (p *Partition[V]) Len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, e := range p.m {
		if !e.deleted {
			n++
		}
	}
	return n
}

// Range calls fn for the keys starting with prefix that have a value, in
// key order, until fn returns false. It iterates over a copy taken when it
// starts, so fn may Put and Delete.
func (p *Partition[V]) Range(prefix string, fn func(key string, v V) bool) {
	type kv struct {
		k string
		v V
	}
	p.mu.Lock()
	var all []kv
	if g := p.s.cfg.Group; g != nil && prefix != "" && g(prefix) == prefix {
		for k := range p.groups[prefix] {
			if e := p.m[k]; !e.deleted {
				all = append(all, kv{k, e.val})
			}
		}
	} else {
		for k, e := range p.m {
			if !e.deleted && strings.HasPrefix(k, prefix) {
				all = append(all, kv{k, e.val})
			}
		}
	}
	p.mu.Unlock()
	slices.SortFunc(all, func(a, b kv) int { return strings.Compare(a.k, b.k) })
	for _, e := range all {
		if !fn(e.k, e.v) {
			return
		}
	}
}

// Put sets the value of key. It encodes v at once (an encoding error is
// returned and changes nothing; see StoreConfig.EncodeAtFlush); the key's
// changelog record is produced when the batch (or the timer firing) is
// made durable. The key's timer,
// if any, is kept.
func (p *Partition[V]) Put(key string, v V) error {
	var raw []byte // nil: encoded by changes (StoreConfig.EncodeAtFlush)
	if !p.s.cfg.EncodeAtFlush {
		var err error
		if raw, err = p.s.cfg.Encode(v); err != nil {
			return fmt.Errorf("state store %s: encode %q: %w", p.s.cfg.Name, key, err)
		}
		if raw == nil {
			raw = []byte{} // a nil value would be a tombstone
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return fmt.Errorf("state store %s: put %q: %w", p.s.cfg.Name, key, ErrPartitionClosed)
	}
	e := p.m[key]
	if e == nil {
		e = &entry[V]{}
		p.add(key, e)
	}
	if e.deleted {
		*e = entry[V]{}
	}
	e.val, e.raw = v, raw
	p.touchLocked(key, e)
	return nil
}

// PutNow sets the value of key like Put and makes it durable at once: it
// produces the key's changelog record and waits for the acknowledgement
// (retrying like the batch's changelog records) before it returns. The
// value is thus durable ahead of the batch's outputs, and of the outputs
// of earlier records of the batch whose writes to key it includes: use it
// for a value that must be durable before an external effect (a lease
// taken before an upstream call) or that must stay in the changelog as
// its own record although the key changes again in the same batch (a
// status transition), not for one that records the outputs of its batch.
// It fails when the worker lost its partition (the write is fenced, as
// the batch's would be).
func (p *Partition[V]) PutNow(key string, v V) error {
	raw, err := p.s.cfg.Encode(v)
	if err != nil {
		return fmt.Errorf("state store %s: encode %q: %w", p.s.cfg.Name, key, err)
	}
	if raw == nil {
		raw = []byte{}
	}
	p.mu.Lock()
	if p.closed || p.produceNow == nil {
		p.mu.Unlock()
		return fmt.Errorf("state store %s: put %q: %w", p.s.cfg.Name, key, ErrPartitionClosed)
	}
	e := p.m[key]
	if e == nil || e.deleted {
		e = &entry[V]{}
		p.add(key, e)
	}
	// The record below carries v; an earlier Put's encoding must not
	// outlive it, or a later timer-only change of the key (which marks it
	// without encoding) would produce that stale value with a newer token.
	e.val, e.raw = v, nil
	p.touchLocked(key, e)
	delete(p.dirty, key)
	rec := &kgo.Record{Topic: p.s.cfg.Topic, Partition: p.tp.partition, Key: []byte(key), Value: raw, Headers: tokenHeaders(e.tok, e.timer)}
	p.mu.Unlock()
	if err := p.produceNow([]*kgo.Record{rec}); err != nil {
		return fmt.Errorf("state store %s: put %q now: %w", p.s.cfg.Name, key, err)
	}
	return nil
}

// Flush produces the changelog records of every key written since the
// last flush now, and waits for their acknowledgement (retrying like the
// batch's), instead of with the batch: like [Partition.PutNow] for all of
// them at once, so the values are durable ahead of the batch's outputs
// (and its offsets, as always). Use it to make a value that announces an
// external effect durable before the effect. It fails when the worker lost
// its partition.
func (p *Partition[V]) Flush() error {
	p.mu.Lock()
	closed := p.closed || p.produceNow == nil
	p.mu.Unlock()
	if closed {
		return fmt.Errorf("state store %s: flush: %w", p.s.cfg.Name, ErrPartitionClosed)
	}
	recs, err := p.changes()
	if err != nil {
		return err
	}
	if len(recs) == 0 {
		return nil
	}
	if err := p.produceNow(recs); err != nil {
		return fmt.Errorf("state store %s: flush %d keys now: %w", p.s.cfg.Name, len(recs), err)
	}
	return nil
}

// Delete removes key and its timer; a tombstone is produced with the
// batch. Deleting a key without a value does nothing.
func (p *Partition[V]) Delete(key string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return fmt.Errorf("state store %s: delete %q: %w", p.s.cfg.Name, key, ErrPartitionClosed)
	}
	e, ok := p.m[key]
	if !ok || e.deleted {
		return nil
	}
	var zero V
	e.val, e.raw, e.deleted, e.timer, e.tries = zero, nil, true, 0, 0
	p.touchLocked(key, e)
	return nil
}

// touchLocked gives key's entry the next token and marks it for the
// changelog.
func (p *Partition[V]) touchLocked(key string, e *entry[V]) {
	p.seq++
	e.tok, e.tokened = Token{Epoch: p.epoch, Version: p.seq}, true
	p.dirty[key] = struct{}{}
}

// Token returns the fencing token of key's last write (the write this
// owner made, or the restored record's) and whether it has one.
func (p *Partition[V]) Token(key string) (Token, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	e, ok := p.m[key]
	if !ok || !e.tokened {
		return Token{}, false
	}
	return e.tok, true
}

// NextToken returns the token the next Put or Delete of this partition
// will carry, for a value that records its own token (Put it right after,
// from the same goroutine). With Config.KeyConcurrency another key's write
// may come in between: the Put then carries a greater version than the
// value records, but a key's recorded versions still grow with its writes
// (they are made one after the other).
func (p *Partition[V]) NextToken() Token {
	p.mu.Lock()
	defer p.mu.Unlock()
	return Token{Epoch: p.epoch, Version: p.seq + 1}
}

// SetTimer sets key's one-shot timer to at, replacing any earlier one.
// The timer is part of the key's entry: it is written to the changelog
// with the entry (header sluice.state.timer), so it survives a restart or
// a rebalance, and Delete removes it. When it is due, the owner of the
// partition calls the runner's timer function (see [WithTimers]) with the
// key, on the partition's worker between batches; the timer is cleared
// before that call and the cleared entry is written with the firing's
// effects, so a firing whose effects were made durable does not fire
// again, while one interrupted by a crash fires again on the next owner
// (at-least-once). key must have a value, and the runner a timer function.
func (p *Partition[V]) SetTimer(key string, at time.Time) error {
	return p.setTimer(key, max(at.UnixMilli(), 1))
}

// ClearTimer removes key's timer, if any.
func (p *Partition[V]) ClearTimer(key string) error { return p.setTimer(key, 0) }

func (p *Partition[V]) setTimer(key string, at int64) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch e, ok := p.m[key]; {
	case p.closed:
		return fmt.Errorf("state store %s: timer of %q: %w", p.s.cfg.Name, key, ErrPartitionClosed)
	case !ok || e.deleted:
		if at == 0 {
			return nil
		}
		return fmt.Errorf("state store %s: timer of %q: the key has no value (a timer belongs to an entry)", p.s.cfg.Name, key)
	case at > 0 && !p.timersOn:
		return fmt.Errorf("state store %s: timer of %q: the runner has no timer function (run.WithTimers)", p.s.cfg.Name, key)
	case e.timer == at:
		e.tries = 0 // set again: a new timer, whose firing starts at attempt 1
		return nil
	default:
		e.timer, e.tries = at, 0
		p.touchLocked(key, e)
		if at > 0 {
			heap.Push(&p.timers, timerItem{at: at, key: key})
		}
		return nil
	}
}

// Timer returns key's timer and whether it has one.
func (p *Partition[V]) Timer(key string) (time.Time, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if e, ok := p.m[key]; ok && !e.deleted && e.timer > 0 {
		return time.UnixMilli(e.timer), true
	}
	return time.Time{}, false
}

// partStore is a Partition seen by the runtime, whatever its value type.
type partStore interface {
	name() string
	topic() string
	// restoreRecord applies one changelog record during the restore.
	restoreRecord(rec *kgo.Record) restoreOutcome
	// maxEpoch is the greatest epoch the restore read.
	maxEpoch() int32
	// serve ends the restore: the partition is written with epoch from
	// now on.
	serve(epoch int32)
	// changes returns the changelog records of the keys written since the
	// last call, in key order, and forgets them.
	changes() ([]*kgo.Record, error)
	// nextTimer returns the earliest timer (Unix ms).
	nextTimer() (int64, bool)
	// due clears and returns up to limit timers due at now, earliest
	// first, each with the failed calls of its firing so far.
	due(now int64, limit int) []timerItem
	// rearm sets key's timer to at, with tries failed calls of its firing,
	// unless it was set meanwhile.
	rearm(key string, at int64, tries int)
	// close refuses writes from now on.
	close()
}

// restoreOutcome is what a restore did with one changelog record.
type restoreOutcome int

const (
	restoreApplied     restoreOutcome = iota
	restoreFenced                     // a zombie's late record (see Token)
	restoreFolded                     // Fold kept the earlier entry
	restoreUndecodable                // Decode refused it
)

func (p *Partition[V]) name() string  { return p.s.cfg.Name }
func (p *Partition[V]) topic() string { return p.s.cfg.Topic }

func (p *Partition[V]) restoreRecord(rec *kgo.Record) restoreOutcome {
	tok, timer, tokened := parseToken(rec.Headers)
	if tokened {
		if tok.Epoch < p.floor {
			return restoreFenced
		}
		p.floor = tok.Epoch
		p.seq = max(p.seq, tok.Version)
	}
	key := string(rec.Key)
	next := &entry[V]{tok: tok, tokened: tokened, timer: timer, off: rec.Offset, deleted: rec.Value == nil}
	if next.deleted {
		next.timer = 0
	} else {
		v, err := p.s.cfg.Decode(rec.Value)
		if err != nil {
			return restoreUndecodable
		}
		next.val = v
	}
	if cur, ok := p.m[key]; ok && p.s.cfg.Fold != nil && !p.s.cfg.Fold(cur.asEntry(key), next.asEntry(key)) {
		return restoreFolded
	}
	p.add(key, next)
	return restoreApplied
}

func (p *Partition[V]) maxEpoch() int32 { return p.floor }

func (p *Partition[V]) serve(epoch int32) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.epoch = epoch
	for k, e := range p.m {
		if e.deleted {
			p.remove(k)
			continue
		}
		if e.timer > 0 {
			p.timers = append(p.timers, timerItem{at: e.timer, key: k})
		}
	}
	heap.Init(&p.timers)
}

func (p *Partition[V]) changes() ([]*kgo.Record, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.dirty) == 0 {
		return nil, nil
	}
	keys := make([]string, 0, len(p.dirty))
	for k := range p.dirty {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	clear(p.dirty)
	recs := make([]*kgo.Record, 0, len(keys))
	for _, k := range keys {
		e := p.m[k]
		rec := &kgo.Record{Topic: p.s.cfg.Topic, Partition: p.tp.partition, Key: []byte(k), Headers: tokenHeaders(e.tok, e.timer)}
		if e.deleted {
			p.remove(k)
		} else {
			raw := e.raw
			if raw == nil {
				var err error
				if raw, err = p.s.cfg.Encode(e.val); err != nil {
					return nil, fmt.Errorf("state store %s: encode %q: %w", p.s.cfg.Name, k, err)
				}
				if raw == nil {
					raw = []byte{}
				}
			}
			rec.Value, e.raw = raw, nil
		}
		recs = append(recs, rec)
	}
	return recs, nil
}

func (p *Partition[V]) nextTimer() (int64, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.dropStaleLocked()
	if len(p.timers) == 0 {
		return 0, false
	}
	return p.timers[0].at, true
}

// dropStaleLocked pops heap items that no longer match their key's timer
// (the timer was changed, cleared or the key deleted since).
func (p *Partition[V]) dropStaleLocked() {
	for len(p.timers) > 0 {
		top := p.timers[0]
		if e, ok := p.m[top.key]; ok && !e.deleted && e.timer == top.at {
			return
		}
		heap.Pop(&p.timers)
	}
}

func (p *Partition[V]) due(now int64, limit int) []timerItem {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []timerItem
	for len(out) < limit {
		p.dropStaleLocked()
		if len(p.timers) == 0 || p.timers[0].at > now {
			break
		}
		it := heap.Pop(&p.timers).(timerItem)
		e := p.m[it.key]
		it.tries = e.tries
		e.timer, e.tries = 0, 0
		p.touchLocked(it.key, e)
		out = append(out, it)
	}
	return out
}

func (p *Partition[V]) rearm(key string, at int64, tries int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if e, ok := p.m[key]; ok && !e.deleted && e.timer == 0 && !p.closed {
		e.timer, e.tries = at, tries
		p.touchLocked(key, e)
		heap.Push(&p.timers, timerItem{at: at, key: key})
	}
}

func (p *Partition[V]) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
}

// timerItem is a keyed timer in a partition's heap (tries is set by due
// only: the count lives in the entry, so that setting, clearing or deleting
// the key's timer resets it).
type timerItem struct {
	at    int64
	key   string
	tries int
}

// timerHeap orders timers by due time (then key); items whose key's timer
// changed since they were pushed are dropped lazily.
type timerHeap []timerItem

func (h timerHeap) Len() int { return len(h) }
func (h timerHeap) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].key < h[j].key
}
func (h timerHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *timerHeap) Push(x any)   { *h = append(*h, x.(timerItem)) }
func (h *timerHeap) Pop() any {
	old := *h
	it := old[len(old)-1]
	*h = old[:len(old)-1]
	return it
}

// stateKey is the context key of a worker's partitionState.
type stateKey struct{}

// partitionState is the state of one input partition: its part of every
// store, in the order of WithStores.
type partitionState struct {
	stores  []partStore
	byStore map[StateStore]partStore
}

// byName returns the partition of the store named name.
func (ps *partitionState) byName(name string) partStore {
	for _, s := range ps.stores {
		if s.name() == name {
			return s
		}
	}
	return nil
}

// close refuses the stores' writes from now on.
func (ps *partitionState) close() {
	for _, s := range ps.stores {
		s.close()
	}
}

func newPartitionState(decls []StateStore, k tp, timers bool, now produceFunc) *partitionState {
	ps := &partitionState{byStore: make(map[StateStore]partStore, len(decls))}
	for _, d := range decls {
		p := d.newPartition(k, timers, now)
		ps.stores = append(ps.stores, p)
		ps.byStore[d] = p
	}
	return ps
}
