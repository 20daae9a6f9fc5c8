package run

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/stages"
)

// TxRunner runs a Kafka→Kafka stage exactly once with franz-go transactions
// (kgo.GroupTransactSession): the outputs of a poll, its dead-letter records
// and the consumed offsets are committed in one transaction, so a consumer
// reading the output topics with read_committed isolation sees every input's
// outputs exactly once, even across crashes and rebalances.
//
// Contract: records are processed in offset order per partition, one poll
// at a time on one goroutine (parallelism comes from group members). A stage
// retry error is retried in place (bounded by Config.Retry, the poll's
// transaction stays open), then dead-lettered as retries_exhausted. A fatal
// error aborts the transaction, so none of the poll's outputs become visible
// and its offsets are not committed; Run returns the error. Config's batch
// and sink settings do not apply.
type TxRunner[In any] struct {
	cfg    Config
	txnID  string
	decode stages.Decoder[In]
	stage  stages.Func[In, *kgo.Record]
	o      options
	m      *metrics
	ready  atomic.Bool
}

// NewTransactional builds a transactional runner. transactionalID must be
// unique per member (for example the pipeline name plus the host name); the
// stage returns the records to produce (with their Topic set).
func NewTransactional[In any](cfg Config, transactionalID string, decode stages.Decoder[In], stage stages.Func[In, *kgo.Record], opts ...Option) (*TxRunner[In], error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("pipeline config: %w", err)
	}
	if transactionalID == "" {
		return nil, errors.New("transactional runner needs a transactional id")
	}
	if cfg.Window.MaxKeys > 0 {
		return nil, errors.New("transactional runner: coalescing windows are not supported")
	}
	o, m, err := setup(cfg, opts)
	if err != nil {
		return nil, err
	}
	o.log = o.log.With("mode", "transactional")
	return &TxRunner[In]{cfg: cfg.withDefaults(), txnID: transactionalID, decode: decode, stage: stage, o: o, m: m}, nil
}

// Name returns the pipeline name.
func (r *TxRunner[In]) Name() string { return r.cfg.Name }

// Ready reports true once Run started; the transactional runner keeps no
// partition state to restore.
func (r *TxRunner[In]) Ready() bool { return r.ready.Load() }

// Run consumes until ctx is cancelled (returning nil) or a fatal error.
func (r *TxRunner[In]) Run(ctx context.Context) error {
	reset := kgo.NewOffset().AtStart()
	if r.cfg.StartOffset == "latest" {
		reset = kgo.NewOffset().AtEnd()
	}
	opts := append([]kgo.Opt{}, r.o.kopts...)
	opts = append(opts,
		kgo.TransactionalID(r.txnID),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumerGroup(r.cfg.Group),
		kgo.ConsumeTopics(r.cfg.Topics...),
		kgo.Balancers(kgo.CooperativeStickyBalancer()),
		kgo.ConsumeResetOffset(reset),
		kgo.RequireStableFetchOffsets(),
	)
	sess, err := kgo.NewGroupTransactSession(opts...)
	if err != nil {
		return fmt.Errorf("pipeline %s: transactional client: %w", r.cfg.Name, err)
	}
	defer sess.Close()
	base, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	stop := context.AfterFunc(ctx, cancel) // a shutdown abandons an in-place retry
	defer stop()
	// A worker-shaped helper gives the transactional path the same decode,
	// retry and dead-letter behaviour as the batch runner.
	shim := &Runner[In, *kgo.Record]{cfg: r.cfg, decode: r.decode, stage: r.stage, o: r.o, m: r.m, cl: sess.Client(), base: base}
	w := newWorker(shim, tp{})
	r.ready.Store(true)
	defer r.ready.Store(false)

	for ctx.Err() == nil {
		fetches := sess.PollRecords(ctx, r.cfg.BatchMaxRecords)
		if fetches.IsClientClosed() || ctx.Err() != nil {
			break
		}
		fetches.EachError(func(topic string, p int32, err error) {
			r.m.errors.WithLabelValues("fetch").Inc()
			r.o.log.Warn("fetch error", "topic", topic, "partition", p, "err", err)
		})
		recs := fetches.Records()
		if len(recs) == 0 {
			continue
		}
		if err := sess.Begin(); err != nil {
			return fmt.Errorf("pipeline %s: begin transaction: %w", r.cfg.Name, err)
		}
		var fatal error
		var out []*kgo.Record
		for _, rec := range recs {
			r.m.in.WithLabelValues(rec.Topic).Inc()
			w.tp = tp{rec.Topic, rec.Partition}
			outs, dl, err := w.processOne(rec)
			if err != nil {
				fatal = err
				break
			}
			if dl.rec != nil {
				out = append(out, dl.rec)
				continue
			}
			out = append(out, outs...)
		}
		if fatal == nil {
			for _, o := range out {
				sess.Produce(ctx, o, nil) // errors surface in End, which then aborts
			}
		}
		t0 := time.Now()
		committed, err := sess.End(context.WithoutCancel(ctx), kgo.TransactionEndTry(fatal == nil))
		r.m.sinkDur.Observe(time.Since(t0).Seconds())
		if err != nil {
			return fmt.Errorf("pipeline %s: end transaction: %w", r.cfg.Name, err)
		}
		if fatal != nil {
			if errors.Is(fatal, errAbandoned) {
				break
			}
			return fmt.Errorf("pipeline %s: %w (transaction aborted)", r.cfg.Name, fatal)
		}
		if committed {
			r.m.committed.WithLabelValues(recs[0].Topic).Add(float64(len(recs)))
		} else {
			r.m.errors.WithLabelValues("commit").Inc()
			r.o.log.Warn("transaction aborted (rebalance or produce failure); records will be re-polled")
		}
	}
	return nil
}
