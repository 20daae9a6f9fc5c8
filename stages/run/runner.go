package run

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/stages"
)

// Runner consumes Config.Topics as Config.Group and runs decode → stage →
// sink for every record. See the package documentation for its contracts.
type Runner[In, Out any] struct {
	cfg    Config
	decode stages.Decoder[In]
	stage  stages.Func[In, Out]
	sink   stages.Sink[Out]
	merger Merger[Out]    // the sink, when coalescing windows are on
	chunks chunkPool      // arena chunks the windows written gave back, for the next ones (see chunkPool)
	pub    Publisher[Out] // the sink, when it publishes records (publish.go)
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
	end     *endWatch     // Config.StopAtEnd's, set by Run
	txn     *txnCommitter // Config.DLQCommit DLQTransactional's committer, set by Run; nil otherwise

	// State stores and timers (state.go, timer.go, changelog.go).
	state *stateRuntime  // nil: no stores and no timers
	timer timerSpec[Out] // the timer function of WithTimers
	gen   atomic.Int32   // group generation of the last assignment

	// Memory budget (budget.go).
	budget       *Budget
	mem          *heldBytes         // this runner's share of budget
	budgetCloses prometheus.Counter // sluice_window_budget_closes_total
	partShare    atomic.Int64       // partitionShare of the assigned partitions, set by waitForCapacity
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
	if err := checkOffsetStore(cfg, o); err != nil {
		return nil, err
	}
	if err := checkStateFlush(cfg, o); err != nil {
		return nil, err
	}
	pub, _ := sink.(Publisher[Out])
	if err := checkPublisher(cfg, o, pub != nil); err != nil {
		return nil, err
	}
	// State stores and timers.
	timer, err := timersOf[Out](cfg.Name, o)
	if err != nil {
		return nil, err
	}
	state, err := newStateRuntime(cfg, o, timer.fn != nil, timer.every > 0)
	if err != nil {
		return nil, err
	}
	r := &Runner[In, Out]{cfg: cfg.withDefaults(), decode: decode, stage: stage, sink: sink, merger: merger, pub: pub, o: o, m: m,
		workers: map[tp]*worker[In, Out]{}, drained: make(chan struct{}, 1), state: state, timer: timer}
	if err := r.initBudget(o.reg); err != nil { // memory budget
		return nil, err
	}
	return r, nil
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
	if o.lagEvery <= 0 {
		o.lagEvery = lagInterval
	}
	m, err := newMetrics(o.reg, cfg.Name, cfg.Topics)
	if err != nil {
		return o, nil, fmt.Errorf("register metrics of pipeline %s: %w", cfg.Name, err)
	}
	return o, m, nil
}

// Name returns the pipeline name.
func (r *Runner[In, Out]) Name() string { return r.cfg.Name }

// Ready reports whether the runner joined its group, ran its assign hook,
// restored the state stores of its assigned partitions and has not failed.
func (r *Runner[In, Out]) Ready() bool {
	r.failMu.Lock()
	failed := r.failErr != nil
	r.failMu.Unlock()
	restoring := r.state != nil && r.state.restoring.Load() > 0
	return r.ready.Load() && !failed && !restoring
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
	// The fetch buffers are sized from the memory budget (fetchOpts).
	opts := append([]kgo.Opt{kgo.FetchMaxWait(time.Second), kgo.MetadataMaxAge(metadataMaxAge)}, fetchOpts(r.budget)...)
	opts = append(opts, r.o.kopts...)
	transactional := r.cfg.DLQCommit == DLQTransactional && !r.cfg.NoDLQ
	autoCommit := r.cfg.CommitInterval
	if transactional {
		// The committer commits (dlqtxn.go); the group client never does
		// by itself (its marks only follow the commits), and a member
		// starting on a partition waits for a transaction still holding
		// offsets of it.
		autoCommit = 24 * time.Hour
		opts = append(opts, kgo.RequireStableFetchOffsets())
	}
	opts = append(opts,
		kgo.ConsumerGroup(r.cfg.Group),
		kgo.ConsumeTopics(r.cfg.Topics...),
		kgo.Balancers(kgo.CooperativeStickyBalancer()),
		kgo.AutoCommitMarks(),
		kgo.AutoCommitInterval(autoCommit),
		kgo.AutoCommitCallback(r.onAutoCommit),
		kgo.OnPartitionsAssigned(r.onAssigned),
		kgo.OnPartitionsRevoked(r.onRevoked),
		kgo.OnPartitionsLost(r.onLost),
	)
	opts = append(opts, r.cfg.offsetOpts()...)
	latest, setClient := latestOpts(r.cfg, r.o.log)
	opts = append(opts, latest...)
	if r.state != nil && len(r.state.stores) > 0 { // state stores: co-partitioning, and changelog records go to their partition
		if err := r.state.check(ctx, r.o.kopts, r.cfg.Topics[0], r.o.log); err != nil {
			return fmt.Errorf("pipeline %s: %w", r.cfg.Name, err)
		}
		opts = append(opts, kgo.RecordPartitioner(r.state.partitioner()))
	}
	if r.cfg.StopAtEnd {
		end, err := newEndWatch(runCtx, r.o.kopts, r.cfg.Group, r.cfg.Topics, r.cfg.StopIdle)
		if err != nil {
			return fmt.Errorf("pipeline %s: %w", r.cfg.Name, err)
		}
		if end == nil {
			r.o.log.Info("nothing to do: the group committed every input partition up to its end (StopAtEnd)", "group", r.cfg.Group)
			return nil
		}
		r.end = end
		opts = append(opts, kgo.KeepControlRecords())
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("pipeline %s: kafka client: %w", r.cfg.Name, err)
	}
	setClient(cl)
	r.cl = cl
	committed := make(chan struct{})
	stopCommits := func() {}
	if transactional {
		if r.txn, err = newTxnCommitter(r.cfg, r.o.kopts, cl, r.o.log, r.m, r.onAutoCommit); err != nil {
			cl.Close()
			return fmt.Errorf("pipeline %s: %w", r.cfg.Name, err)
		}
		cctx, cancel := context.WithCancel(hard)
		stopCommits = func() { cancel(); <-committed }
		go func() {
			defer close(committed)
			r.txn.loop(cctx, r.cfg.CommitInterval, r.fail)
		}()
	}
	r.o.log.Info("pipeline starting", "group", r.cfg.Group, "topics", r.cfg.Topics)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		if err := watchTopics(runCtx, r.o.kopts, r.cfg.Topics, r.o.topicCheck); err != nil {
			r.fail(err)
		}
	}()
	if r.end != nil {
		go r.end.run(runCtx, cl, r.o.log, func() { stop(nil) })
	}
	lagDone := make(chan struct{})
	go func() {
		defer close(lagDone)
		r.watchLag(runCtx)
	}()
	defer func() { <-lagDone }()

	for runCtx.Err() == nil {
		r.waitForCapacity(runCtx)
		r.waitForBudget(runCtx) // memory budget
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
			r.mu.Lock()
			w := r.workers[tp{p.Topic, p.Partition}]
			r.mu.Unlock()
			if w == nil {
				return // revoked meanwhile: the new owner re-reads from the committed offset
			}
			r.noteSkipped(w, p)
			w.push(p.Records, p.HighWatermark)
			r.end.fetched(p.Topic, p.Partition, last.Offset+1)
		})
	}

	stop(nil)
	<-watched
	r.end.wait()

	// Shutdown: finish or abandon in-flight batches, commit, leave.
	r.mu.Lock()
	all := make([]*worker[In, Out], 0, len(r.workers))
	for k, w := range r.workers {
		all = append(all, w)
		delete(r.workers, k)
	}
	r.mu.Unlock()
	r.stopWorkers(all)
	stopCommits() // a periodic commit under way is cancelled; the final one follows
	cctx, ccancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.RevokeTimeout)
	if err := r.commitNow(cctx); err != nil {
		r.m.errors.WithLabelValues("commit").Inc()
		r.o.log.Error("final commit failed", "err", err)
	}
	ccancel()
	if r.txn != nil {
		r.txn.close()
	}
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

// commitNow commits the offsets marked or submitted so far (with their
// dead letters under DLQTransactional); used on revoke and shutdown.
func (r *Runner[In, Out]) commitNow(ctx context.Context) error {
	if r.txn != nil {
		return r.txn.commit(ctx, false)
	}
	return r.cl.CommitMarkedOffsets(ctx)
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
