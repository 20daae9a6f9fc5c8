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
// transaction stays open), then dead-lettered as retries_exhausted; a
// [stages.Wait] waits in place too, spending no attempt, so it holds the
// whole poll (every partition of the member) and its open transaction,
// which the broker aborts when the wait outlasts the transaction timeout. A
// [stages.DeadLetterWith]'s outputs are produced in the transaction with
// its dead letter. A fatal
// error aborts the transaction, so none of the poll's outputs become visible
// and its offsets are not committed; Run returns the error. A failed
// produce also aborts the transaction (never commits the inputs without
// their outputs) and the poll is retried after Config.SinkRetry's backoff,
// or after the wait of an error classified [stages.RetryAfter] when that
// is longer (see Config.SinkRetry); a cancelled ctx ends the wait. An
// output too large for its topic dead-letters its source record as
// sink_rejected (rule kafka.too_large); a dead letter too large for the
// DLQ topic is produced as a stub (see the package documentation). Dead
// letters are counted in the DLQ metrics (sluice_dlq_records_total and
// sluice_dlq_records_by_reason_total) once their transaction committed, so
// an aborted and re-polled transaction counts nothing twice. Records
// that retention or DeleteRecords deleted before the group consumed them
// are reported as by [Runner]: a WARN with the offset range and
// sluice_offsets_skipped_total (see Config.StartOffset). With StartOffset
// "latest", a partition the group has no commit for starts at its end (its
// last stable offset) listed when it is assigned, which is committed for the
// group then (see Config.StartOffset): a transaction aborted before the
// group's first transaction committed polls again from there, never from
// the log start, and a member that stops before it committed one leaves the
// next owner that position. Config's batch settings do not apply.
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
	if cfg.NoDLQ || cfg.StopAtEnd || cfg.KeyConcurrency > 1 {
		return nil, errors.New("transactional runner: NoDLQ, StopAtEnd and KeyConcurrency are not supported")
	}
	o, m, err := setup(cfg, opts)
	if err != nil {
		return nil, err
	}
	if len(o.stores) > 0 || o.timers != nil || o.offsets != nil {
		return nil, errors.New("transactional runner: state stores, timers and offset stores are not supported")
	}
	o.log = o.log.With("mode", "transactional")
	return &TxRunner[In]{cfg: cfg.withDefaults(), txnID: transactionalID, decode: decode, stage: stage, o: o, m: m}, nil
}

// Name returns the pipeline name.
func (r *TxRunner[In]) Name() string { return r.cfg.Name }

// Ready reports true once Run started; the transactional runner keeps no
// partition state to restore.
func (r *TxRunner[In]) Ready() bool { return r.ready.Load() }

// Run consumes until ctx is cancelled (returning nil) or a fatal error,
// a deleted or recreated input topic included (see [Runner.Run]).
func (r *TxRunner[In]) Run(ctx context.Context) error {
	opts := append([]kgo.Opt{kgo.MetadataMaxAge(metadataMaxAge)}, r.o.kopts...)
	opts = append(opts,
		kgo.TransactionalID(r.txnID),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumerGroup(r.cfg.Group),
		kgo.ConsumeTopics(r.cfg.Topics...),
		kgo.Balancers(kgo.CooperativeStickyBalancer()),
		kgo.RequireStableFetchOffsets(),
	)
	opts = append(opts, r.cfg.offsetOpts()...)
	latest, setClient := latestOpts(r.cfg, r.o.log)
	opts = append(opts, latest...)
	sess, err := kgo.NewGroupTransactSession(opts...)
	if err != nil {
		return fmt.Errorf("pipeline %s: transactional client: %w", r.cfg.Name, err)
	}
	defer sess.Close()
	setClient(sess.Client())
	// A deleted or recreated input topic stops the runner (see
	// watchTopics): watchErr is set before ctx is cancelled.
	ctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	var watchErr error
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		if watchErr = watchTopics(ctx, r.o.kopts, r.cfg.Topics, r.o.topicCheck); watchErr != nil {
			stopWatch()
		}
	}()
	defer func() { stopWatch(); <-watched }()
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

	// After a produce batch refused as too large, the poll is produced
	// again one record at a time (oneByOne); a source record with an output
	// that does not fit alone is remembered in rejected and dead-lettered
	// as sink_rejected when it comes again, so that it cannot block its
	// partition (each step aborts the transaction and re-polls).
	var oneByOne bool
	rejected := map[srcCoord]error{}
	failures := 0 // consecutive transactions aborted by a transient produce failure
	// noted: the end of the skipped range reported last, per partition
	// (see noteSkipped).
	noted := map[tp]int64{}

	for ctx.Err() == nil {
		fetches := sess.PollRecords(ctx, r.cfg.BatchMaxRecords)
		if fetches.IsClientClosed() || ctx.Err() != nil {
			break
		}
		failed := false
		fetches.EachError(func(topic string, p int32, err error) {
			failed = true
			r.m.errors.WithLabelValues("fetch").Inc()
			r.o.log.Warn("fetch error", "topic", topic, "partition", p, "err", err)
		})
		r.noteSkipped(sess.Client(), fetches, noted)
		recs := fetches.Records()
		if len(recs) == 0 {
			if failed {
				pause(ctx, fetchErrorBackoff)
			}
			continue
		}
		if err := sess.Begin(); err != nil {
			return fmt.Errorf("pipeline %s: begin transaction: %w", r.cfg.Name, err)
		}
		var fatal error
		var out []txOut
		var dropped []srcCoord // rejected records dead-lettered in this transaction
		for i, rec := range recs {
			r.m.in.WithLabelValues(rec.Topic).Inc()
			w.tp = tp{rec.Topic, rec.Partition}
			if rerr, ok := rejected[coordOf(rec)]; ok {
				out = append(out, dlqOut(w.dlqRecord(rec, sinkRejection(ruleTooLarge, rerr), 1, r.cfg.Name+"/sink"), i))
				dropped = append(dropped, coordOf(rec))
				continue
			}
			outs, dl, err := w.processOne(rec)
			if err != nil {
				fatal = err
				break
			}
			if dl.rec != nil {
				out = append(out, dlqOut(dl, i)) // with the outputs of a stages.DeadLetterWith
			}
			for _, o := range outs {
				out = append(out, txOut{rec: o, src: i})
			}
		}
		var perr error
		if fatal == nil {
			if oneByOne {
				perr = r.produceOneByOne(ctx, sess, recs, out, rejected)
			} else {
				perr = produceAll(ctx, sess, out)
			}
		}
		t0 := time.Now()
		committed, err := sess.End(context.WithoutCancel(ctx), kgo.TransactionEndTry(fatal == nil && perr == nil))
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
		if perr != nil && stages.Classify(perr).Kind == stages.KindFatal {
			return fmt.Errorf("pipeline %s: %w (transaction aborted)", r.cfg.Name, perr)
		}
		switch {
		case committed:
			countCommitted(r.m, recs)
			for _, o := range out {
				if o.dlq {
					r.m.deadLettered(o.reason, o.rule)
				}
			}
			for _, c := range dropped {
				delete(rejected, c)
			}
			oneByOne, failures = false, 0
		case perr == nil:
			r.m.errors.WithLabelValues("commit").Inc()
			r.o.log.Warn("transaction aborted (rebalance); records will be re-polled")
		case errors.Is(perr, errTooLarge):
			// Not a failure to back off from: the retry makes progress.
			r.o.log.Warn("transaction aborted: a record was refused as too large; producing the poll again one record at a time", "err", perr)
			oneByOne = true
		default:
			failures++
			r.m.retries.WithLabelValues("sink").Inc()
			r.o.log.Warn("transaction aborted: produce failed; records will be re-polled", "attempt", failures, "err", perr)
			t := time.NewTimer(retryWait(r.cfg.SinkRetry, failures, stages.Classify(perr).After))
			select {
			case <-t.C:
			case <-ctx.Done():
			}
			t.Stop()
		}
	}
	stopWatch()
	<-watched
	if watchErr != nil {
		return fmt.Errorf("pipeline %s: %w", r.cfg.Name, watchErr)
	}
	return nil
}

// noteSkipped is the transactional runner's [Runner.noteSkipped]: it logs
// a WARN with the range and counts sluice_offsets_skipped_total for the
// offsets of a partition that retention or DeleteRecords deleted before the
// group consumed them. Every transaction commits all it polled and an
// aborted one rewinds the session to the group's commits, so a partition's
// first record in a poll is expected at the committed offset; one past it
// because the log start passed it (not for a gap above the log start) is a
// skip. noted holds, per partition, the end of the range reported last: the
// poll of an aborted transaction is polled again, and a range is reported
// once. Called by the poll loop only, after each poll.
func (r *TxRunner[In]) noteSkipped(cl *kgo.Client, fetches kgo.Fetches, noted map[tp]int64) {
	var committed map[string]map[int32]kgo.EpochOffset
	fetches.EachPartition(func(p kgo.FetchTopicPartition) {
		if len(p.Records) == 0 {
			return
		}
		if committed == nil {
			committed = cl.CommittedOffsets()
		}
		from, ok := committedOffset(committed, p.Topic, p.Partition)
		if !ok {
			return
		}
		k := tp{p.Topic, p.Partition}
		from = max(from, noted[k])
		if to, ok := skippedTo(from, p); ok {
			noted[k] = to
			reportSkipped(r.m, r.o.log, p.Topic, p.Partition, from, to)
		}
	})
}

// countCommitted adds the records of a committed transaction's poll to
// sluice_records_done_total, per topic: one poll may hold records of
// several input topics.
func countCommitted(m *metrics, recs []*kgo.Record) {
	n := map[string]int{}
	for _, rec := range recs {
		n[rec.Topic]++
	}
	for topic, c := range n {
		m.committed.WithLabelValues(topic).Add(float64(c))
	}
}

// txOut is a record produced by a transaction: an output of recs[src], or
// its dead letter (dlq, with the reason and rule it carries).
type txOut struct {
	rec    *kgo.Record
	src    int
	dlq    bool
	reason stages.Reason
	rule   string
}

// dlqOut is the txOut of d, the dead letter of recs[src].
func dlqOut(d dlqItem, src int) txOut {
	return txOut{rec: d.rec, src: src, dlq: true, reason: d.reason, rule: d.rule}
}

// srcCoord locates a source record.
type srcCoord struct {
	topic     string
	partition int32
	offset    int64
}

func coordOf(rec *kgo.Record) srcCoord { return srcCoord{rec.Topic, rec.Partition, rec.Offset} }

// produceAll produces the transaction's records and waits for them. Any
// failure must abort the transaction: kgo commits a transaction whose
// records failed with a per-record error (too large, unknown topic, delivery
// timeout), which would skip their source records. A too-large refusal is
// reported as errTooLarge.
func produceAll(ctx context.Context, sess *kgo.GroupTransactSession, out []txOut) error {
	recs := make([]*kgo.Record, len(out))
	for i, o := range out {
		recs[i] = o.rec
	}
	var large error
	for _, res := range sess.ProduceSync(ctx, recs...) {
		switch {
		case res.Err == nil:
		case tooLarge(res.Err):
			if large == nil {
				large = res.Err
			}
		default:
			return fmt.Errorf("produce: %w", res.Err)
		}
	}
	if large != nil {
		return fmt.Errorf("%w: %w", errTooLarge, large)
	}
	return nil
}

// produceOneByOne produces the transaction's records one at a time, in
// order. A dead letter goes through produceDeadLetter (its stub when it
// does not fit alone; a fatal error when the stub does not fit either); a
// source record with an output that does not fit alone is added to
// rejected and errTooLarge is returned (the transaction must abort:
// earlier outputs of that record may be in it).
func (r *TxRunner[In]) produceOneByOne(ctx context.Context, sess *kgo.GroupTransactSession, recs []*kgo.Record, out []txOut, rejected map[srcCoord]error) error {
	produce := func(rec *kgo.Record) error { return sess.ProduceSync(ctx, rec).FirstErr() }
	for _, o := range out {
		if o.dlq {
			if err := produceDeadLetter(ctx, sess.Client(), r.o.log, r.cfg.DLQTopic, o.rec, produce); err != nil {
				if stages.Classify(err).Kind == stages.KindFatal {
					return err // no dead letter of the source record fits the DLQ topic
				}
				return fmt.Errorf("produce: %w", err)
			}
			continue
		}
		err := produce(o.rec)
		switch {
		case err == nil:
		case tooLarge(err):
			src := recs[o.src]
			rejected[coordOf(src)] = fmt.Errorf("output record of %d bytes to %s: %w", len(o.rec.Key)+len(o.rec.Value), o.rec.Topic, err)
			return fmt.Errorf("%w: output of %s/%d@%d: %w", errTooLarge, src.Topic, src.Partition, src.Offset, err)
		default:
			return fmt.Errorf("produce: %w", err)
		}
	}
	return nil
}
