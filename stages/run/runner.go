package run

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluicehq/sluice/stages"
)

// Option configures optional runner knobs.
type Option func(*options)

type options struct {
	reg        prometheus.Registerer
	log        *slog.Logger
	kopts      []kgo.Opt
	onAssigned func(ctx context.Context, assigned map[string][]int32) error
	onRevoked  func(ctx context.Context, revoked map[string][]int32)
	stageName  string
	topicCheck time.Duration // period of watchTopics (default topicCheckInterval); set by tests
}

// WithRegisterer registers the runner's metrics on reg (default: a private
// registry, i.e. metrics are kept but not exported).
func WithRegisterer(reg prometheus.Registerer) Option { return func(o *options) { o.reg = reg } }

// WithLogger sets the logger (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = l } }

// WithKafkaOpts adds client options, typically the connection settings from
// kconf.Config.Opts (seed brokers, SASL, TLS). Group, topics, balancer and
// commit options are set by the runner and must not be passed here.
func WithKafkaOpts(opts ...kgo.Opt) Option {
	return func(o *options) { o.kopts = append(o.kopts, opts...) }
}

// WithAssignHook sets a function called with newly assigned partitions
// before their workers start, e.g. to restore state from a changelog topic.
// The runner reports ready only after the hook returned; an error stops the
// runner.
func WithAssignHook(fn func(ctx context.Context, assigned map[string][]int32) error) Option {
	return func(o *options) { o.onAssigned = fn }
}

// WithRevokeHook sets a function called after the workers of revoked
// partitions stopped and their offsets were committed.
func WithRevokeHook(fn func(ctx context.Context, revoked map[string][]int32)) Option {
	return func(o *options) { o.onRevoked = fn }
}

// WithStageName sets the dlq.stage header of records dead-lettered by the
// stage (default: the pipeline name). Decode failures carry
// "<name>/decode" and sink rejections "<name>/sink".
func WithStageName(name string) Option { return func(o *options) { o.stageName = name } }

// Runner consumes Config.Topics as Config.Group and runs decode → stage →
// sink for every record. See the package documentation for its contracts.
type Runner[In, Out any] struct {
	cfg    Config
	decode stages.Decoder[In]
	stage  stages.Func[In, Out]
	sink   stages.Sink[Out]
	merger Merger[Out] // the sink, when coalescing windows are on
	o      options
	m      *metrics

	cl      *kgo.Client
	base    context.Context // workers' parent: survives the caller's cancel until the shutdown deadline
	mu      sync.Mutex
	workers map[tp]*worker[In, Out]
	drained chan struct{} // cap 1: a worker took a batch off its queue
	ready   atomic.Bool
	started atomic.Bool

	failMu  sync.Mutex
	failErr error
	stopRun context.CancelCauseFunc
}

type tp struct {
	topic     string
	partition int32
}

// New builds a runner. It validates cfg and registers metrics; it does not
// connect until Run.
func New[In, Out any](cfg Config, decode stages.Decoder[In], stage stages.Func[In, Out], sink stages.Sink[Out], opts ...Option) (*Runner[In, Out], error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("pipeline config: %w", err)
	}
	if decode == nil || stage == nil || sink == nil {
		return nil, errors.New("pipeline needs a decoder, a stage and a sink")
	}
	var merger Merger[Out]
	if cfg.Window.MaxKeys > 0 {
		mg, ok := sink.(Merger[Out])
		if !ok {
			return nil, fmt.Errorf("pipeline %s: Window.MaxKeys is set but the sink (%T) does not implement run.Merger", cfg.Name, sink)
		}
		merger = mg
	}
	o, m, err := setup(cfg, opts)
	if err != nil {
		return nil, err
	}
	return &Runner[In, Out]{cfg: cfg.withDefaults(), decode: decode, stage: stage, sink: sink, merger: merger, o: o, m: m,
		workers: map[tp]*worker[In, Out]{}, drained: make(chan struct{}, 1)}, nil
}

// setup applies the options with their defaults and registers the metrics;
// shared by New and NewTransactional.
func setup(cfg Config, opts []Option) (options, *metrics, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if o.log == nil {
		o.log = slog.Default()
	}
	o.log = o.log.With("pipeline", cfg.Name)
	if o.stageName == "" {
		o.stageName = cfg.Name
	}
	if o.topicCheck <= 0 {
		o.topicCheck = topicCheckInterval
	}
	m, err := newMetrics(o.reg, cfg.Name, cfg.Topics)
	if err != nil {
		return o, nil, fmt.Errorf("register metrics of pipeline %s: %w", cfg.Name, err)
	}
	return o, m, nil
}

// Name returns the pipeline name.
func (r *Runner[In, Out]) Name() string { return r.cfg.Name }

// Ready reports whether the runner joined its group, restored the state of
// its assigned partitions (assign hook) and has not failed.
func (r *Runner[In, Out]) Ready() bool {
	r.failMu.Lock()
	failed := r.failErr != nil
	r.failMu.Unlock()
	return r.ready.Load() && !failed
}

// Run consumes until ctx is cancelled or a fatal error occurs. On return,
// every worker stopped (finishing its batch within Config.RevokeTimeout),
// marked offsets were committed and the member left the group. It returns
// nil after a cancel of ctx and the fatal error otherwise. Run may be called
// once.
//
// An input topic deleted, or deleted and recreated under the same name,
// while Run consumes it is a fatal error saying so (within seconds: its
// metadata is checked every 5s, and a deletion needs 3 answers in a row
// over at least 10s saying the topic does not exist, so that a broker's
// passing UNKNOWN_TOPIC_OR_PARTITION does not stop a healthy runner; see
// watchTopics): the Kafka client cannot consume the new instance, and
// idling would hide it. Run it again (a restarted process) to consume the
// new instance, from Config.StartOffset since the group's commits went with
// the old one.
func (r *Runner[In, Out]) Run(ctx context.Context) error {
	if !r.started.CompareAndSwap(false, true) {
		return errors.New("runner already started")
	}
	hard, hardCancel := context.WithCancel(context.WithoutCancel(ctx))
	defer hardCancel()
	r.base = hard
	runCtx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	r.stopRun = stop

	// A short fetch wait bounds how long a resumed partition waits for the
	// next fetch round; a short metadata age bounds how long partitions
	// added to an input topic go unconsumed (kgo's default is 5 minutes).
	// Callers may override both.
	opts := append([]kgo.Opt{kgo.FetchMaxWait(time.Second), kgo.MetadataMaxAge(metadataMaxAge)}, r.o.kopts...)
	opts = append(opts,
		kgo.ConsumerGroup(r.cfg.Group),
		kgo.ConsumeTopics(r.cfg.Topics...),
		kgo.Balancers(kgo.CooperativeStickyBalancer()),
		kgo.AutoCommitMarks(),
		kgo.AutoCommitInterval(r.cfg.CommitInterval),
		kgo.AutoCommitCallback(r.onAutoCommit),
		kgo.OnPartitionsAssigned(r.onAssigned),
		kgo.OnPartitionsRevoked(r.onRevoked),
		kgo.OnPartitionsLost(r.onLost),
	)
	opts = append(opts, r.cfg.offsetOpts()...)
	latest, setClient := latestOpts(r.cfg, r.o.log)
	opts = append(opts, latest...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("pipeline %s: kafka client: %w", r.cfg.Name, err)
	}
	setClient(cl)
	r.cl = cl
	r.o.log.Info("pipeline starting", "group", r.cfg.Group, "topics", r.cfg.Topics)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		if err := watchTopics(runCtx, r.o.kopts, r.cfg.Topics, r.o.topicCheck); err != nil {
			r.fail(err)
		}
	}()

	for runCtx.Err() == nil {
		r.waitForCapacity(runCtx)
		fetches := cl.PollRecords(runCtx, r.cfg.MaxInFlight)
		if fetches.IsClientClosed() {
			break
		}
		failed := false
		fetches.EachError(func(topic string, p int32, err error) {
			if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
				return
			}
			failed = true
			r.m.errors.WithLabelValues("fetch").Inc()
			r.o.log.Warn("fetch error", "topic", topic, "partition", p, "err", err)
		})
		if failed && fetches.NumRecords() == 0 {
			pause(runCtx, fetchErrorBackoff)
		}
		fetches.EachPartition(func(p kgo.FetchTopicPartition) {
			if len(p.Records) == 0 {
				return
			}
			last := p.Records[len(p.Records)-1]
			r.m.lag.WithLabelValues(p.Topic, strconv.Itoa(int(p.Partition))).Set(float64(p.HighWatermark - last.Offset - 1))
			r.mu.Lock()
			w := r.workers[tp{p.Topic, p.Partition}]
			r.mu.Unlock()
			if w == nil {
				return // revoked meanwhile: the new owner re-reads from the committed offset
			}
			r.noteSkipped(w, p)
			w.push(p.Records, p.HighWatermark)
		})
	}

	stop(nil)
	<-watched

	// Shutdown: finish or abandon in-flight batches, commit, leave.
	r.mu.Lock()
	all := make([]*worker[In, Out], 0, len(r.workers))
	for k, w := range r.workers {
		all = append(all, w)
		delete(r.workers, k)
	}
	r.mu.Unlock()
	r.stopWorkers(all)
	cctx, ccancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.RevokeTimeout)
	if err := cl.CommitMarkedOffsets(cctx); err != nil {
		r.m.errors.WithLabelValues("commit").Inc()
		r.o.log.Error("final commit failed", "err", err)
	}
	ccancel()
	cl.Close()
	r.ready.Store(false)

	r.failMu.Lock()
	ferr := r.failErr
	r.failMu.Unlock()
	if ferr != nil {
		return fmt.Errorf("pipeline %s: %w", r.cfg.Name, ferr)
	}
	r.o.log.Info("pipeline stopped")
	return nil
}

// waitForCapacity implements backpressure. Before polling again it waits,
// up to backpressureWait, for workers whose queue reached MaxInFlight to
// drain; a worker still full after that has its partition's fetches paused
// (resumed once it drained half its queue) so that one slow partition does
// not hold back the others. Pausing is the slow path on purpose: kgo drops
// the buffered data of a paused partition and a resumed partition waits for
// the next fetch round, so pausing on every full queue would thrash.
func (r *Runner[In, Out]) waitForCapacity(ctx context.Context) {
	var deadline <-chan time.Time
	for {
		var full []*worker[In, Out]
		r.mu.Lock()
		for _, w := range r.workers {
			if w.full() {
				full = append(full, w)
			}
		}
		r.mu.Unlock()
		if len(full) == 0 {
			return
		}
		if deadline == nil {
			t := time.NewTimer(backpressureWait)
			defer t.Stop()
			deadline = t.C
		}
		select {
		case <-r.drained:
		case <-ctx.Done():
			return
		case <-deadline:
			for _, w := range full {
				w.setPause(pauseBackpressure, true)
			}
			return
		}
	}
}

// noteSkipped makes visible the offsets of w's partition that were deleted
// from the log before this member consumed them: the group's committed
// offset fell below the log start while no member ran, or the log start
// passed the fetch position (of a paused partition, say). Retention or
// DeleteRecords removed those records; kgo resumes at the log start, and
// this logs a WARN with the offset range and counts it in
// sluice_offsets_skipped_total (see reportSkipped). Gaps above the log
// start (compaction, transaction markers) are not skips, and neither are
// the records a group without a commit never had (see committedOffset).
// Called by the poll loop only, before w.push, with records in p.
func (r *Runner[In, Out]) noteSkipped(w *worker[In, Out], p kgo.FetchTopicPartition) {
	from := w.next
	w.next = p.Records[len(p.Records)-1].Offset + 1
	if from < 0 {
		c, ok := committedOffset(r.cl.CommittedOffsets(), p.Topic, p.Partition)
		if !ok {
			return
		}
		from = c
	}
	if to, ok := skippedTo(from, p); ok {
		reportSkipped(r.m, r.o.log, p.Topic, p.Partition, from, to)
	}
}

// committedOffset returns the group's committed offset of topic/partition
// in committed (kgo.Client.CommittedOffsets: fetched when the partition was
// assigned, or committed since), and false when the group has none. kgo
// lists a partition it consumed without a commit as committed at offset 0
// with epoch -1; that placeholder is no commit (a brand-new group starting
// at the log start of a topic whose early records retention removed skips
// nothing it ever had).
func committedOffset(committed map[string]map[int32]kgo.EpochOffset, topic string, partition int32) (int64, bool) {
	c, ok := committed[topic][partition]
	if !ok || c.Offset < 0 || c == (kgo.EpochOffset{Epoch: -1, Offset: 0}) {
		return 0, false
	}
	return c.Offset, true
}

// skippedTo reports whether p's records start past from, the offset
// expected next, because the log start passed from; the offsets from..to
// (to excluded) were deleted before they were consumed. Gaps above the log
// start are not skips.
func skippedTo(from int64, p kgo.FetchTopicPartition) (to int64, skipped bool) {
	first := p.Records[0].Offset
	if from < 0 || first <= from || from >= p.LogStartOffset {
		return 0, false
	}
	return min(first, p.LogStartOffset), true
}

// reportSkipped logs a WARN naming the deleted offsets from..to (to
// excluded) of topic/partition and counts them in
// sluice_offsets_skipped_total.
func reportSkipped(m *metrics, log *slog.Logger, topic string, partition int32, from, to int64) {
	m.skipped.WithLabelValues(topic).Add(float64(to - from))
	log.Warn("records deleted before they were consumed (retention or DeleteRecords passed the group's position); resuming at the log start",
		"topic", topic, "partition", partition, "from", from, "to", to, "skipped", to-from)
}

// pause waits d or until ctx is done.
func pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// fetchErrorBackoff is how long a poll loop waits after a poll that
// brought only errors: kgo hands some errors (UNKNOWN_TOPIC_ID of a
// recreated topic) back at once, poll after poll.
const fetchErrorBackoff = 250 * time.Millisecond

// metadataMaxAge is how often the runners' clients refresh their metadata
// at the latest: partitions added to an input topic are assigned (the group
// rebalances) within about this long. kgo's default is 5 minutes;
// [WithKafkaOpts] may override it with kgo.MetadataMaxAge.
const metadataMaxAge = 30 * time.Second

// backpressureWait is how long the poll loop waits for a full partition queue
// to drain before pausing that partition.
const backpressureWait = 250 * time.Millisecond

// fail records a fatal error and stops the runner.
func (r *Runner[In, Out]) fail(err error) {
	r.failMu.Lock()
	if r.failErr == nil {
		r.failErr = err
	}
	r.failMu.Unlock()
	r.m.errors.WithLabelValues("fatal").Inc()
	r.o.log.Error("fatal error, stopping", "err", err)
	if r.stopRun != nil {
		r.stopRun(err)
	}
}

func (r *Runner[In, Out]) onAssigned(ctx context.Context, cl *kgo.Client, assigned map[string][]int32) {
	if r.o.onAssigned != nil && len(assigned) > 0 {
		if err := r.o.onAssigned(ctx, assigned); err != nil {
			r.fail(fmt.Errorf("assign hook: %w", err))
			return
		}
	}
	r.mu.Lock()
	for topic, ps := range assigned {
		for _, p := range ps {
			k := tp{topic, p}
			if r.workers[k] != nil {
				continue
			}
			w := newWorker(r, k)
			r.workers[k] = w
			r.m.assigned.Inc()
			go w.loop()
		}
	}
	r.mu.Unlock()
	r.ready.Store(true)
	r.o.log.Info("partitions assigned", "partitions", assigned)
}

func (r *Runner[In, Out]) detach(ps map[string][]int32) []*worker[In, Out] {
	r.mu.Lock()
	defer r.mu.Unlock()
	var ws []*worker[In, Out]
	for topic, parts := range ps {
		for _, p := range parts {
			k := tp{topic, p}
			if w := r.workers[k]; w != nil {
				ws = append(ws, w)
				delete(r.workers, k)
			}
			r.m.lag.DeleteLabelValues(topic, strconv.Itoa(int(p)))
		}
	}
	return ws
}

// onAutoCommit counts (sluice_runtime_errors_total{kind="commit"}) and
// logs a periodic commit that failed or that the coordinator refused for
// some partitions; kgo's own callback only logs to its logger, which the
// runner does not set, so such failures went unseen until a rebalance or
// the shutdown. The marks stay, and the next interval commits them again.
// Refusals that only say a rebalance is under way (REBALANCE_IN_PROGRESS,
// ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID) are logged at INFO and not
// counted: the revoke commits what is marked.
func (r *Runner[In, Out]) onAutoCommit(_ *kgo.Client, req *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
	if err != nil {
		if !errors.Is(err, context.Canceled) { // canceled: the client is leaving
			r.m.errors.WithLabelValues("commit").Inc()
			r.o.log.Warn("periodic offset commit failed; retried at the next interval", "group", r.cfg.Group, "err", err)
		}
		return
	}
	names := map[[16]byte]string{} // v10+ names topics by ID only
	for _, t := range req.Topics {
		names[t.TopicID] = t.Topic
	}
	var refused []string
	var first error
	rebalancing := true
	for _, t := range resp.Topics {
		topic := t.Topic
		if topic == "" {
			topic = names[t.TopicID]
		}
		for _, p := range t.Partitions {
			if perr := kerr.ErrorForCode(p.ErrorCode); perr != nil {
				refused = append(refused, topic+"/"+strconv.Itoa(int(p.Partition)))
				if first == nil {
					first = perr
				}
				rebalancing = rebalancing && (errors.Is(perr, kerr.RebalanceInProgress) ||
					errors.Is(perr, kerr.IllegalGeneration) || errors.Is(perr, kerr.UnknownMemberID))
			}
		}
	}
	switch {
	case len(refused) == 0:
	case rebalancing:
		// A rebalance is under way: the group rejoins and the revoke
		// commits what is marked; not an error worth an alert.
		r.o.log.Info("periodic offset commit refused during a rebalance; committed on revoke or at the next interval", "group", r.cfg.Group,
			"partitions", len(refused), "first", refused[0], "err", first)
	default:
		r.m.errors.WithLabelValues("commit").Inc()
		r.o.log.Warn("periodic offset commit refused; retried at the next interval", "group", r.cfg.Group,
			"partitions", len(refused), "first", refused[0], "err", first)
	}
}

func (r *Runner[In, Out]) onRevoked(ctx context.Context, cl *kgo.Client, revoked map[string][]int32) {
	ws := r.detach(revoked)
	r.stopWorkers(ws)
	cctx, cancel := context.WithTimeout(ctx, r.cfg.RevokeTimeout)
	defer cancel()
	if err := cl.CommitMarkedOffsets(cctx); err != nil {
		r.m.errors.WithLabelValues("commit").Inc()
		r.o.log.Error("commit on revoke failed", "err", err)
	}
	if r.o.onRevoked != nil && len(revoked) > 0 {
		r.o.onRevoked(ctx, revoked)
	}
	if len(revoked) > 0 {
		r.o.log.Info("partitions revoked", "partitions", revoked)
	}
}

func (r *Runner[In, Out]) onLost(ctx context.Context, cl *kgo.Client, lost map[string][]int32) {
	ws := r.detach(lost)
	for _, w := range ws {
		w.lost.Store(true)
	}
	r.awaitWorkers(ws, 0)
	if r.o.onRevoked != nil && len(lost) > 0 {
		r.o.onRevoked(ctx, lost)
	}
	r.o.log.Warn("partitions lost", "partitions", lost)
}

// stopWorkers asks workers to finish their current batch and waits for them,
// cancelling those still busy after RevokeTimeout (see awaitWorkers).
func (r *Runner[In, Out]) stopWorkers(ws []*worker[In, Out]) {
	for _, w := range ws {
		close(w.stopping)
	}
	r.awaitWorkers(ws, r.cfg.RevokeTimeout)
}

// awaitWorkers waits up to timeout for workers to finish, then cancels those
// still running and waits abandonGrace more. A worker that has not returned
// by then (blocked in a sink or stage that ignores its context) is
// abandoned: it is left running but never marks an offset and no longer
// pauses or resumes its partition, so a shutdown or a rebalance never hangs
// on it; its batch is redelivered.
func (r *Runner[In, Out]) awaitWorkers(ws []*worker[In, Out], timeout time.Duration) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	rest := waitDone(ws, deadline.C)
	if len(rest) == 0 {
		return
	}
	for _, w := range rest {
		w.cancel()
	}
	grace := time.NewTimer(abandonGrace)
	defer grace.Stop()
	for _, w := range waitDone(rest, grace.C) {
		w.abandon()
		r.m.errors.WithLabelValues("abandoned").Inc()
		r.o.log.Error("worker did not stop after its context was cancelled (sink or stage ignoring it); abandoned, its batch will be redelivered",
			"topic", w.tp.topic, "partition", w.tp.partition)
	}
}

// waitDone waits for the workers in order until timeout fires and returns
// those not done by then.
func waitDone[In, Out any](ws []*worker[In, Out], timeout <-chan time.Time) []*worker[In, Out] {
	for i, w := range ws {
		select {
		case <-w.done:
		case <-timeout:
			var rest []*worker[In, Out]
			for _, w := range ws[i:] {
				select {
				case <-w.done:
				default:
					rest = append(rest, w)
				}
			}
			return rest
		}
	}
	return nil
}

// abandonGrace is how long a cancelled worker may take to return before it
// is abandoned.
const abandonGrace = 2 * time.Second
