package ticks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/pipelines"
	"github.com/sluicehq/sluice/sinks/objstore"
	"github.com/sluicehq/sluice/stages"
	"github.com/sluicehq/sluice/stages/ratelimit"
	"github.com/sluicehq/sluice/stages/run"
)

// taskIn is a decoded task with its original value bytes (kept for the DLQ).
type taskIn struct {
	Task
	raw []byte
}

func decodeTaskIn(key, value []byte) (taskIn, error) {
	t, err := decodeTask(key, value)
	if err != nil {
		return taskIn{}, err
	}
	return taskIn{Task: t, raw: value}, nil
}

// fetchReq is one source request, the input of the rate-limited fetch.
type fetchReq struct {
	account    string
	symbol     string
	start, end int64
}

// worker is the ticks stage: it owns the job states of its assigned
// partitions of the tasks topic and is their only writer. They live in the
// runtime's state store jobs (changelog: the jobs topic), which the runner
// restores on assignment and writes after each batch's chained tasks and
// before its offsets; a stage call reaches its partition's states through
// its context. Its partitions are processed concurrently, each in offset
// order; every method is safe for that.
type worker struct {
	cfg    Config
	store  objstore.Store
	jobs   *run.Store[JobState]
	m      *metrics
	log    *slog.Logger
	fetchF stages.Func[fetchReq, []Tick]
}

// jobStates is the job-state store's partition a stage call works on.
type jobStates = *run.Partition[JobState]

// newJobStore declares the job-state store on the jobs topic: JSON job
// states keyed by job key, the last record of a key being its state.
func newJobStore(topic string) (*run.Store[JobState], error) {
	return run.NewStore(run.StoreConfig[JobState]{
		Name: "jobs", Topic: topic,
		Encode: func(st JobState) ([]byte, error) { return json.Marshal(st) },
		Decode: func(b []byte) (JobState, error) {
			var st JobState
			err := json.Unmarshal(b, &st)
			return st, err
		},
	})
}

func newWorker(cfg Config, store objstore.Store, lim *ratelimit.Limiter, m *metrics, log *slog.Logger) (*worker, error) {
	jobs, err := newJobStore(cfg.JobsTopic)
	if err != nil {
		return nil, err
	}
	w := &worker{cfg: cfg, store: store, jobs: jobs, m: m, log: log}
	w.fetchF = w.fetch
	if lim != nil {
		w.fetchF = ratelimit.Stage(lim, func(m stages.Msg[fetchReq]) (string, bool) { return m.Value.account, true }, cfg.RateLimit.Backoff, w.fetch)
	}
	return w, nil
}

// state returns a copy of the job's state, or nil.
func (w *worker) state(jobs jobStates, key string) *JobState {
	st, ok := jobs.Get(key)
	if !ok {
		return nil
	}
	return &st
}

// owns reports whether the job's current instance is instance (the fence
// checked before every write).
func (w *worker) owns(ctx context.Context, jobs jobStates, key, instance string) bool {
	if ctx.Err() != nil {
		return false
	}
	st := w.state(jobs, key)
	return st != nil && st.JobInstanceID == instance
}

// setState stores st; the runner writes it to the jobs topic, in the
// task's partition, with the batch.
func (w *worker) setState(jobs jobStates, st *JobState, prev Status) error {
	return w.storeState(jobs.Put, st, prev)
}

// setStateNow stores st and writes it to the jobs topic at once.
func (w *worker) setStateNow(jobs jobStates, st *JobState, prev Status) error {
	return w.storeState(jobs.PutNow, st, prev)
}

func (w *worker) storeState(put func(string, JobState) error, st *JobState, prev Status) error {
	st.UpdatedAt = w.cfg.Now().UnixMilli()
	if err := put(st.JobKey, *st); err != nil {
		return fmt.Errorf("job state: %w", err)
	}
	if st.Status != prev {
		w.m.jobs.WithLabelValues(string(st.Status)).Inc()
		if st.Status == StatusStalled {
			w.m.stalled.Inc()
		}
	}
	return nil
}

func (w *worker) taskRecord(p int32, t Task) (*kgo.Record, error) {
	t.JobKey = JobKey(t.Symbol, t.Date)
	t.RequestedAt = w.cfg.Now().UnixMilli()
	v, err := json.Marshal(t)
	if err != nil {
		return nil, fmt.Errorf("encode task: %w", err)
	}
	return &kgo.Record{Topic: w.cfg.TasksTopic, Partition: p, Key: []byte(t.JobKey), Value: v}, nil
}

// stage is the pipeline's stage function.
func (w *worker) stage(ctx context.Context, m stages.Msg[taskIn]) ([]*kgo.Record, error) {
	t := m.Value.Task
	jobs, err := w.jobs.Of(ctx)
	if err != nil {
		return nil, err
	}
	if st := w.state(jobs, t.JobKey); st != nil && st.ChainOffset != nil && *st.ChainOffset == m.Source.Offset && !t.Backfill {
		return w.resendChain(jobs, st, t)
	}
	switch t.Kind {
	case KindTrigger:
		return w.onTrigger(jobs, m.Source.Offset, t)
	case KindSegment:
		return w.segmentTask(ctx, jobs, m)
	case KindStall:
		return w.onStall(jobs, m.Source.Offset, t)
	case KindBootstrap:
		return w.onBootstrap(ctx, jobs, m.Source.Offset, t)
	default:
		return nil, stages.DeadLetter(stages.ReasonUnknownTaskType, "", fmt.Errorf("task kind %q", clip(t.Kind)))
	}
}

// resendChain handles a redelivery of the record that last chained st's
// main line (st.ChainOffset): its effects on the state are already durable,
// but the crash that caused the redelivery may have lost the task it
// chained, so that task (from the cursor) is sent again — and, for a
// bootstrap, its backfill tasks. A duplicate of the re-sent task is
// dropped like any other duplicate: it is not at ChainOffset.
func (w *worker) resendChain(jobs jobStates, st *JobState, t Task) ([]*kgo.Record, error) {
	w.m.dropped.WithLabelValues("duplicate").Inc()
	var gaps [][2]int64
	if t.Kind == KindBootstrap && t.JobInstanceID == st.JobInstanceID {
		gaps = t.Gaps
	}
	out, err := w.chainTasks(jobs.Partition(), st, gaps, nil)
	if err != nil {
		return nil, err
	}
	w.log.Info("redelivered task re-sends its chained task", "job", st.JobKey, "kind", t.Kind, "instance", st.JobInstanceID, "cursor", st.Cursor, "records", len(out))
	return out, nil
}

// chainTasks appends to out the tasks that carry job st on: a backfill
// segment task per gap, then, unless the job is terminal or its cursor
// reached the session end, the segment task from the cursor.
func (w *worker) chainTasks(p int32, st *JobState, gaps [][2]int64, out []*kgo.Record) ([]*kgo.Record, error) {
	seg := Task{Kind: KindSegment, Symbol: st.Symbol, Date: st.Date, JobInstanceID: st.JobInstanceID, AccountID: st.AccountID}
	for _, g := range gaps {
		t := seg
		t.StartTs, t.EndTs, t.Backfill = g[0], g[1], true
		tr, err := w.taskRecord(p, t)
		if err != nil {
			return nil, err
		}
		out = append(out, tr)
	}
	if !st.Terminal() && st.Cursor < st.EndTime {
		t := seg
		t.StartTs = st.Cursor + 1
		tr, err := w.taskRecord(p, t)
		if err != nil {
			return nil, err
		}
		out = append(out, tr)
	}
	return out, nil
}

func (w *worker) onTrigger(jobs jobStates, offset int64, t Task) ([]*kgo.Record, error) {
	cur := w.state(jobs, t.JobKey)
	if cur != nil && cur.JobInstanceID == t.JobInstanceID {
		w.m.dropped.WithLabelValues("duplicate").Inc()
		return nil, nil // redelivered trigger
	}
	if cur != nil && cur.ChainOffset != nil && offset < *cur.ChainOffset {
		// A redelivered trigger older than the record that started or last
		// advanced the current instance: applying it would bring back a
		// replaced instance.
		w.m.dropped.WithLabelValues("stale").Inc()
		return nil, nil
	}
	at := w.cfg.Now()
	if err := checkTrigger(t, at); err != nil {
		return nil, err
	}
	now := at.UnixMilli()
	st := &JobState{
		JobKey: t.JobKey, Symbol: t.Symbol, Date: t.Date, AccountID: t.AccountID,
		Status: StatusPending, JobInstanceID: t.JobInstanceID,
		Cursor: t.StartTime - 1, StartTime: t.StartTime, EndTime: t.EndTime,
		HeartbeatAt: now, CriticalRanges: t.CriticalRanges, Origin: "trigger", CreatedAt: now,
		ChainOffset: &offset,
	}
	if t.ResumeFrom != nil {
		st.Cursor, st.Origin = max(*t.ResumeFrom, t.StartTime-1), "retrigger"
	}
	if st.AccountID == "" {
		st.AccountID = w.cfg.DefaultAccount
	}
	prev := Status("")
	if cur != nil {
		prev = cur.Status
		w.log.Info("job re-triggered", "job", t.JobKey, "old_instance", cur.JobInstanceID, "instance", t.JobInstanceID)
	}
	return w.startInstance(jobs, st, prev)
}

// startInstance writes st and the first main-line task from its cursor.
func (w *worker) startInstance(jobs jobStates, st *JobState, prev Status) ([]*kgo.Record, error) {
	var out []*kgo.Record
	if st.Cursor >= st.EndTime {
		st.Status = StatusCompleted
	}
	if err := w.setState(jobs, st, prev); err != nil {
		return nil, err
	}
	if st.Status != StatusCompleted {
		tr, err := w.taskRecord(jobs.Partition(), Task{Kind: KindSegment, Symbol: st.Symbol, Date: st.Date, JobInstanceID: st.JobInstanceID, AccountID: st.AccountID, StartTs: st.Cursor + 1})
		if err != nil {
			return nil, err
		}
		out = append(out, tr)
	}
	return out, nil
}

// segmentTask runs a segment task and decides about its failures; the
// runtime retries and dead-letters (Config.Retry is its policy).
// Rate-limit denials pass through (stages.Wait: they spend no attempt).
// Another transient error is retried (after at least PacingBackoff for a
// pacing violation), its type remembered in the job state, until the
// task's last attempt; then, or at once for a permanent error, the job is
// FAILED and the task dead-lettered (retries_exhausted, or exception for a
// permanent error): the FAILED state is written to the job-state store
// before the dead letter is returned, and the runtime produces it with the
// batch, after the dead letter.
func (w *worker) segmentTask(ctx context.Context, jobs jobStates, m stages.Msg[taskIn]) ([]*kgo.Record, error) {
	out, err := w.onSegment(ctx, jobs, m.Source.Offset, m.Value.Task)
	if errors.Is(err, errZombie) {
		w.m.zombies.Inc()
		return nil, nil
	}
	if err == nil || ctx.Err() != nil {
		return out, err
	}
	if c := stages.Classify(err); c.Kind != stages.KindRetry {
		return nil, err
	}
	typ, transient := errorType(err)
	w.m.sourceErrs.WithLabelValues(typ).Inc()
	t := m.Value.Task
	st := w.state(jobs, t.JobKey)
	if st == nil || st.JobInstanceID != t.JobInstanceID {
		return nil, nil // became a zombie meanwhile
	}
	if transient && !m.LastAttempt() {
		// Remember the error type in the job's state.
		st.LastErrorType, st.LastError = typ, err.Error()
		if perr := jobs.Put(t.JobKey, *st); perr != nil {
			return nil, fmt.Errorf("job state: %w", perr)
		}
		w.log.Warn("segment failed, retrying", "job", t.JobKey, "start_ts", t.StartTs, "attempt", m.Attempt, "max_attempts", m.MaxAttempts, "err", err)
		if typ == ErrTypePacing {
			return nil, stages.RetryAfter(w.cfg.PacingBackoff, err)
		}
		return nil, stages.Retry(err)
	}
	reason := stages.ReasonRetriesExhausted
	if !transient {
		reason = stages.ReasonException
	}
	w.log.Error("segment failed for good", "job", t.JobKey, "start_ts", t.StartTs, "attempts", m.Attempt, "reason", reason, "err", err)
	prev := st.Status
	st.LastErrorType, st.LastError = typ, err.Error()
	if !t.Backfill {
		st.Status = StatusFailed
	}
	if serr := w.setState(jobs, st, prev); serr != nil {
		return nil, serr
	}
	return nil, stages.DeadLetter(reason, "", err)
}

// onSegment runs one segment task: fence, heartbeat, idempotency check,
// rate-limited fetch, atomic write, fence again, state and chain.
func (w *worker) onSegment(ctx context.Context, jobs jobStates, offset int64, t Task) ([]*kgo.Record, error) {
	st := w.state(jobs, t.JobKey)
	if st == nil || st.JobInstanceID != t.JobInstanceID {
		w.m.zombies.Inc()
		w.log.Debug("zombie task dropped", "job", t.JobKey, "task_instance", t.JobInstanceID)
		return nil, nil
	}
	prev := st.Status
	rangeEnd := st.EndTime
	if t.Backfill {
		if t.EndTs > 0 {
			rangeEnd = min(t.EndTs, st.EndTime)
		}
	} else {
		switch {
		case st.Terminal():
			w.m.dropped.WithLabelValues("stale").Inc()
			return nil, nil
		case t.StartTs <= st.Cursor:
			// Already done. A redelivery of the segment that last moved the
			// cursor never gets here (stage re-sends its successor); this is
			// another copy, e.g. such a re-sent successor when the original
			// was not lost: re-sending from it would start a second chain.
			w.m.dropped.WithLabelValues("duplicate").Inc()
			return nil, nil
		case t.StartTs != st.Cursor+1:
			w.m.dropped.WithLabelValues("out_of_order").Inc()
			w.log.Warn("segment task beyond the cursor dropped", "job", t.JobKey, "start_ts", t.StartTs, "cursor", st.Cursor)
			return nil, nil
		}
	}
	st.HeartbeatAt = w.cfg.Now().UnixMilli()
	if !t.Backfill && st.Status == StatusPending {
		st.Status = StatusRunning
	}
	if err := w.touch(jobs, st); err != nil {
		return nil, err
	}

	seg, rows, err := w.segment(ctx, jobs, st, t, rangeEnd)
	if err != nil {
		return nil, err
	}
	// Fence again before the state moves.
	if !w.owns(ctx, jobs, t.JobKey, t.JobInstanceID) {
		w.m.zombies.Inc()
		return nil, nil
	}
	st.HeartbeatAt = w.cfg.Now().UnixMilli()
	var next *Task
	if t.Backfill {
		st.Backfills++
		if !seg.Final {
			next = &Task{Kind: KindSegment, Symbol: st.Symbol, Date: st.Date, JobInstanceID: st.JobInstanceID, AccountID: st.AccountID, StartTs: seg.RangeEnd + 1, EndTs: t.EndTs, Backfill: true}
		}
	} else {
		st.Cursor, st.LastStart, st.ChainOffset = seg.RangeEnd, t.StartTs, &offset
		if rows > 0 {
			st.Segments++
			st.Ticks += rows
		}
		if seg.Final || st.Cursor >= st.EndTime {
			st.Status = StatusCompleted
		} else {
			next = &Task{Kind: KindSegment, Symbol: st.Symbol, Date: st.Date, JobInstanceID: st.JobInstanceID, AccountID: st.AccountID, StartTs: seg.RangeEnd + 1}
		}
	}
	if err := w.setState(jobs, st, prev); err != nil {
		return nil, err
	}
	var out []*kgo.Record
	if next != nil {
		tr, err := w.taskRecord(jobs.Partition(), *next)
		if err != nil {
			return nil, err
		}
		out = append(out, tr)
	}
	return out, nil
}

// touch updates the heartbeat and status of the job's state (written with
// the batch, usually coalesced with the state the task ends with).
func (w *worker) touch(jobs jobStates, st *JobState) error {
	cur, ok := jobs.Get(st.JobKey)
	if !ok || cur.JobInstanceID != st.JobInstanceID {
		return nil
	}
	cur.HeartbeatAt, cur.Status = st.HeartbeatAt, st.Status
	if err := jobs.Put(st.JobKey, cur); err != nil {
		return fmt.Errorf("job state: %w", err)
	}
	return nil
}

// segment makes sure the segment file of t exists and returns its metadata
// and row count: an existing readable file of the same instance is reused
// (no fetch); otherwise the ticks are fetched (rate-limited) and written,
// and files of other instances starting inside the written range are
// deleted (overwritten). An empty fetch writes no file and returns a final
// segment covering [start, rangeEnd].
func (w *worker) segment(ctx context.Context, jobs jobStates, st *JobState, t Task, rangeEnd int64) (Segment, int64, error) {
	key := SegmentKey(st.Symbol, st.Date, t.StartTs, st.JobInstanceID)
	if data, err := w.store.Get(ctx, key); err == nil {
		if seg, _, err := DecodeSegment(key, data, false); err == nil && seg.Rows > 0 && seg.RangeStart == t.StartTs {
			w.m.segments.WithLabelValues("skipped").Inc()
			// The crash that left this file may have come before the files it
			// replaces were deleted.
			if err := w.replaceForeign(ctx, st, seg); err != nil {
				return Segment{}, 0, err
			}
			return seg, seg.Rows, nil
		}
		w.log.Warn("unreadable segment file is rewritten", "key", key)
	} else if !errors.Is(err, objstore.ErrNotFound) {
		return Segment{}, 0, storageErr(err)
	}

	res, err := w.fetchF(ctx, stages.Msg[fetchReq]{Key: t.JobKey, Value: fetchReq{account: st.AccountID, symbol: st.Symbol, start: t.StartTs, end: rangeEnd}})
	if err != nil {
		return Segment{}, 0, err
	}
	ticks := res[0]
	max := w.cfg.SegmentMaxTicks
	name, _ := ParseSegmentKey(key)
	seg := Segment{SegmentName: name, Account: st.AccountID, RangeStart: t.StartTs, RangeEnd: rangeEnd, LastTick: t.StartTs - 1, Final: true}
	if err := checkTicks(ticks, t.StartTs, rangeEnd); err != nil {
		return Segment{}, 0, err
	}
	if n := len(ticks); n > 0 {
		last := ticks[n-1].TimeMs
		seg.LastTick, seg.Rows = last, int64(n)
		seg.Final = n < max || last >= rangeEnd
		if !seg.Final {
			seg.RangeEnd = last
		}
		data, err := encodeSegment(seg, ticks)
		if err != nil {
			return Segment{}, 0, err
		}
		if !w.owns(ctx, jobs, t.JobKey, t.JobInstanceID) {
			return Segment{}, 0, errZombie
		}
		if err := w.store.Put(ctx, key, data, "application/vnd.apache.parquet"); err != nil {
			return Segment{}, 0, storageErr(err)
		}
		w.m.segments.WithLabelValues("written").Inc()
	} else {
		w.m.segments.WithLabelValues("empty").Inc()
	}
	if err := w.replaceForeign(ctx, st, seg); err != nil {
		return Segment{}, 0, err
	}
	return seg, seg.Rows, nil
}

// checkTicks rejects a page the source must not return: a tick outside the
// requested [start, end] (e.g. one of the previous segment repeated at the
// boundary) would duplicate or misplace ticks, and ticks out of time order
// would make the last one's time, where the next segment starts, wrong.
// Either is a permanent source error: the job fails instead of writing.
func checkTicks(ticks []Tick, start, end int64) error {
	for i, tk := range ticks {
		if tk.TimeMs < start || tk.TimeMs > end {
			return &SourceError{Type: ErrTypeUnknown, Err: fmt.Errorf("source returned tick %d of %d at %d, outside the requested [%d, %d]", i+1, len(ticks), tk.TimeMs, start, end)}
		}
		if i > 0 && tk.TimeMs < ticks[i-1].TimeMs {
			return &SourceError{Type: ErrTypeUnknown, Err: fmt.Errorf("source returned ticks out of time order: tick %d at %d after one at %d", i+1, tk.TimeMs, ticks[i-1].TimeMs)}
		}
	}
	return nil
}

// storageErr classifies an object-store error of a segment task. A
// permanent configuration error (objstore.IsPermanent: AccessDenied,
// NoSuchBucket, bad credentials…) is fatal: every segment would fail the
// same way, so the runner stops — naming the S3 code and bucket — without
// failing the job or committing the task, which is redelivered once the
// configuration is fixed. A key no store can hold (objstore.ErrInvalidKey)
// is a non-transient storage error: the job fails at once. It is not
// expected: keys are built from the symbol, date and instance that
// checkTrigger and checkBootstrap validated, so only a state record
// written to the jobs topic by hand can lead here. Anything else is
// a transient storage error, retried.
func storageErr(err error) error {
	if errors.Is(err, objstore.ErrInvalidKey) {
		return &SourceError{Type: ErrTypeStorage, Err: err}
	}
	if fatal := pipelines.StoreConfigError("ticks", "segment files", err); fatal != nil {
		return fatal
	}
	return &SourceError{Type: ErrTypeStorage, Transient: true, Err: err}
}

// errZombie stops a task whose instance was replaced while it ran; the
// runtime retries it and the retry drops it as a zombie.
var errZombie = errors.New("job instance replaced during the task")

// replaceForeign deletes the files of other instances whose range starts
// inside seg's range: the current instance's file replaces them.
func (w *worker) replaceForeign(ctx context.Context, st *JobState, seg Segment) error {
	infos, err := w.store.List(ctx, SegmentPrefix(st.Symbol, st.Date))
	if err != nil {
		return storageErr(err)
	}
	for _, in := range infos {
		n, err := ParseSegmentKey(in.Key)
		if err != nil || n.Instance == st.JobInstanceID || n.Start < seg.RangeStart || n.Start > seg.RangeEnd {
			continue
		}
		if err := w.store.Delete(ctx, in.Key); err != nil {
			return storageErr(err)
		}
		w.m.overwritten.Inc()
	}
	return nil
}

// fetch calls the source with a timeout (the inner stage of the limiter).
func (w *worker) fetch(ctx context.Context, m stages.Msg[fetchReq]) ([][]Tick, error) {
	r := m.Value
	cctx, cancel := context.WithTimeout(ctx, w.cfg.SourceTimeout)
	defer cancel()
	t0 := time.Now()
	ticks, err := w.cfg.Source.HistoricalTicks(cctx, r.symbol, r.start, r.end, w.cfg.SegmentMaxTicks)
	w.m.fetchTime.Observe(time.Since(t0).Seconds())
	if err != nil {
		return nil, fmt.Errorf("fetch %s [%d, %d]: %w", r.symbol, r.start, r.end, err)
	}
	w.m.ticks.Add(float64(len(ticks)))
	return [][]Tick{ticks}, nil
}

func (w *worker) onStall(jobs jobStates, offset int64, t Task) ([]*kgo.Record, error) {
	st := w.state(jobs, t.JobKey)
	if st == nil || st.JobInstanceID != t.JobInstanceID || st.HeartbeatAt != t.HeartbeatAt || st.Terminal() {
		w.m.dropped.WithLabelValues("stale").Inc()
		return nil, nil // progress since the supervisor looked, or already handled
	}
	prev := st.Status
	st.Status = StatusStalled
	w.log.Warn("job stalled", "job", t.JobKey, "instance", st.JobInstanceID, "heartbeat_at", time.UnixMilli(st.HeartbeatAt))
	set := w.setState
	if t.Retrigger {
		// The new instance's state replaces this one in the same task:
		// STALLED is written at once so that it stays in the job's history.
		set = w.setStateNow
	}
	if err := set(jobs, st, prev); err != nil {
		return nil, err
	}
	var out []*kgo.Record
	if t.Retrigger {
		now := w.cfg.Now().UnixMilli()
		nst := *st
		nst.JobInstanceID, nst.Status, nst.Origin = uuid.NewString(), StatusPending, "retrigger"
		nst.HeartbeatAt, nst.CreatedAt, nst.LastStart, nst.ChainOffset = now, now, 0, &offset
		more, err := w.startInstance(jobs, &nst, StatusStalled)
		if err != nil {
			return nil, err
		}
		w.log.Info("stalled job re-triggered from its cursor", "job", t.JobKey, "instance", nst.JobInstanceID, "cursor", nst.Cursor)
		out = append(out, more...)
	}
	return out, nil
}

func (w *worker) onBootstrap(ctx context.Context, jobs jobStates, offset int64, t Task) ([]*kgo.Record, error) {
	if w.state(jobs, t.JobKey) != nil {
		w.m.dropped.WithLabelValues("has_state").Inc()
		return nil, nil // bootstrap only fills lost state
	}
	if err := checkBootstrap(t, w.cfg.Now()); err != nil {
		return nil, err
	}
	for _, key := range t.Redundant {
		if err := w.store.Delete(ctx, key); err != nil && !errors.Is(err, objstore.ErrNotFound) {
			return nil, storageErr(err)
		}
		w.m.overwritten.Inc()
	}
	st := *t.State
	now := w.cfg.Now().UnixMilli()
	st.HeartbeatAt, st.Origin, st.ChainOffset = now, "bootstrap", &offset
	if st.CreatedAt == 0 {
		st.CreatedAt = now
	}
	w.m.bootstraps.Inc()
	if err := w.setState(jobs, &st, ""); err != nil {
		return nil, err
	}
	out, err := w.chainTasks(jobs.Partition(), &st, t.Gaps, nil)
	if err != nil {
		return nil, err
	}
	w.log.Info("job state rebuilt from the object store", "job", st.JobKey, "instance", st.JobInstanceID, "cursor", st.Cursor, "gaps", len(t.Gaps))
	return out, nil
}
