package run

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/sluicehq/sluice/stages"
)

// DLQ commit modes (Config.DLQCommit).
const (
	// DLQTransactional commits a batch's dead letters and its offsets in
	// one Kafka transaction: a read_committed reader of the DLQ topic sees
	// exactly one dead letter per bad record across crashes, rebalances and
	// broker restarts. The default.
	DLQTransactional = "transactional"
	// DLQAtLeastOnce produces a batch's dead letters before its offsets are
	// marked, outside any transaction: a crash or a failed commit after the
	// produce dead-letters the records again when they are redelivered.
	DLQAtLeastOnce = "at-least-once"
)

// txnCommitter is the one committer of a runner in DLQTransactional mode:
// the workers hand it, per partition, the offset after their last durable
// batch (or window), the dead letters of the batches behind it and the
// records their sink published (see [Publisher]) (submit), and it commits
// them every Config.CommitInterval, and at once when it is handed dead
// letters (what was handed meanwhile goes with them: under a stream of
// dead letters the transactions follow one another, each with all that is
// pending). A commit with dead letters or published records is one
// transaction of a transactional client of its own: they are produced,
// the offsets are committed for the group with TxnOffsetCommit carrying
// the member's id and generation (KIP-447: a member the group has moved on
// from is refused, and the transaction aborted), and the transaction is
// committed; a commit without either is a plain offset commit of the group
// client. Commits are serialized (cmu), and the group client never commits
// by itself, so no older commit can land after a newer one. A commit that
// fails keeps its entries for the next one (its dead letters and published
// records were aborted with the transaction, and are produced again); a
// transaction whose end failed is aborted and, once the producer was
// initialized again, counts as committed if the group's offsets of the
// partitions still owned say so; while they cannot be read its entries
// wait, neither committed nor produced again, for the next commit to read
// them first (resolve); the entries of a worker that was abandoned or
// whose partition was lost are dropped: the next owner processes those
// records again, and their dead letters and published records were never
// visible. Safe for concurrent use.
type txnCommitter struct {
	cl       *kgo.Client // transactional producer of the dead letters (replaced by renew, under turn)
	opts     []kgo.Opt   // cl's options, for renew
	group    *kgo.Client // the runner's group client
	txnID    string
	groupID  string
	dlqTopic string
	log      *slog.Logger
	m        *metrics
	// periodic reports the outcome of a periodic plain commit as the
	// batch runner reports its autocommits (Runner.onAutoCommit).
	periodic func(*kgo.Client, *kmsg.OffsetCommitRequest, *kmsg.OffsetCommitResponse, error)

	mu      sync.Mutex
	pending map[*txnOwner]*txnEntry
	bytes   int64         // dead-letter bytes in pending
	kick    chan struct{} // cap 1: dead letters were handed over, or submit waits for a commit
	freed   chan struct{} // closed and replaced after every commit (submit waits on it)

	turn chan struct{} // cap 1: held by the commit under way (one at a time)
	open bool          // a transaction is open (guarded by turn)
	// unsure is the batch of a transaction whose end failed and whose
	// outcome is not known yet (the abort or the offset fetch after it
	// failed too): the next commit learns the outcome before anything
	// else (resolve). Guarded by turn.
	unsure map[*txnOwner]*txnEntry
}

// errTxnUnsure marks a commit whose transaction's end failed and whose
// outcome could not be learnt: its batch waits for resolve, neither
// committed nor produced again.
var errTxnUnsure = errors.New("outcome of the dead-letter transaction unknown until the next commit checks the group's offsets")

// txnOwner identifies the worker of a submission. Its entries are dropped
// instead of committed once it is gone: abandoned, its partition lost, or
// revoked (after the revoke's commit, which the entries missed when it
// failed: the partition belongs to the next owner then, which processes
// those records again).
type txnOwner struct {
	tp   tp
	gone atomic.Bool
}

// txnEntry is what one worker submitted since the last commit.
type txnEntry struct {
	off     kgo.EpochOffset
	dlq     []*kgo.Record
	labels  [][2]string   // reason and rule of dlq[i]
	events  []*kgo.Record // a Publisher sink's records, in submission order
	records int           // data records behind off since the last commit (sluice_records_done_total)
	bytes   int64         // of dlq and events
}

// txnMaxBytes bounds the dead letters a committer holds: past it, submit
// waits for a commit.
const txnMaxBytes = 32 << 20

// txnCommitTimeout bounds one periodic commit of the committer.
const txnCommitTimeout = 15 * time.Second

// txnAbortTimeout bounds the abort of a failed transaction: one left open
// is aborted by the broker after the transaction timeout.
const txnAbortTimeout = 5 * time.Second

// txnTimeout is the default transaction timeout of the dead-letter
// producer (kgo.TransactionTimeout in WithKafkaOpts overrides it): how long
// a transaction left open by a member killed mid-commit blocks
// read_committed readers of the DLQ topic and the next owner's offset
// fetch before the broker aborts it.
const txnTimeout = 20 * time.Second

// newTxnCommitter connects the transactional producer. Its transactional
// id is txnID's.
func newTxnCommitter(cfg Config, kopts []kgo.Opt, group *kgo.Client, log *slog.Logger, m *metrics,
	periodic func(*kgo.Client, *kmsg.OffsetCommitRequest, *kmsg.OffsetCommitResponse, error)) (*txnCommitter, error) {
	id := txnID(cfg.Group, group)
	// TxnOffsetCommit v5+ assumes KIP-890 part 2 and v6 topic ids; the
	// requests below are v3/v4 (KIP-447), after an explicit AddOffsetsToTxn.
	versions := kversion.Stable()
	versions.SetMaxKeyVersion(int16(kmsg.TxnOffsetCommit), 4)
	opts := append([]kgo.Opt{kgo.MetadataMaxAge(metadataMaxAge), kgo.TransactionTimeout(txnTimeout)}, kopts...)
	opts = append(opts, kgo.TransactionalID(id), kgo.MaxVersions(versions))
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("dead-letter transactional client: %w", err)
	}
	return &txnCommitter{cl: cl, opts: opts, group: group, txnID: id, groupID: cfg.Group, dlqTopic: cfg.DLQTopic, log: log, m: m, periodic: periodic,
		pending: map[*txnOwner]*txnEntry{}, kick: make(chan struct{}, 1), freed: make(chan struct{}), turn: make(chan struct{}, 1)}, nil
}

// txnID returns the dead-letter producer's transactional id for group,
// whose member client is cl. With static membership (kgo.InstanceID, sluice
// run --instance-id) it is the group and the instance id: stable across
// restarts, so a restarted member's producer fences its killed
// predecessor's and the broker aborts the transaction that one left open
// at once (read_committed readers of the DLQ topic and the next offset
// fetch would wait for the transaction timeout otherwise). Without it, the
// group, the host name and a random suffix: unique per member, so that two
// members never fence each other.
func txnID(group string, cl *kgo.Client) string {
	if iid, _ := cl.OptValue(kgo.InstanceID).(string); iid != "" {
		return group + "/dlq/static/" + iid
	}
	host, _ := os.Hostname()
	var b [6]byte
	_, _ = rand.Read(b[:])
	return group + "/dlq/" + host + "/" + hex.EncodeToString(b[:])
}

// close closes the transactional client, after the commit under way.
func (c *txnCommitter) close() {
	c.turn <- struct{}{}
	defer func() { <-c.turn }()
	c.cl.Close()
}

// renew replaces the transactional client by a new one of the same
// transactional id, whose InitProducerID bumps the producer's epoch and
// aborts whatever transaction of the id is still open. For a client whose
// producer id failed for good: the broker aborted a transaction that
// outlived the transaction timeout (a partition leader gone for longer
// than that) and bumped the epoch, so every later BeginTransaction of the
// old client fails with PRODUCER_FENCED. cause is that failure; the
// caller holds turn.
func (c *txnCommitter) renew(cause error) error {
	cl, err := kgo.NewClient(c.opts...)
	if err != nil {
		return fmt.Errorf("%w; dead-letter transactional client: %w", cause, err)
	}
	c.cl.Close()
	c.cl, c.open = cl, false
	c.log.Warn("dead-letter producer renewed after its transaction was aborted by the broker", "err", cause)
	return nil
}

// submit hands the committer the offset after a durable batch of o's
// partition, with the dead letters and published records (see [Publisher])
// of the batches behind it since o's last submission. It waits while the
// committer holds txnMaxBytes of them, until a commit frees them or ctx is
// done (false). Dead letters start a commit at once; published records
// wait for the interval's.
// n is the bytes of dlq and events as records (recordsBytes).
func (c *txnCommitter) submit(ctx context.Context, o *txnOwner, off kgo.EpochOffset, records int, dlq []*kgo.Record,
	labels [][2]string, events []*kgo.Record, n int64) bool {
	c.mu.Lock()
	for c.bytes > txnMaxBytes && n > 0 {
		freed := c.freed
		c.mu.Unlock()
		select {
		case c.kick <- struct{}{}:
		default:
		}
		select {
		case <-freed:
		case <-ctx.Done():
			return false
		}
		c.mu.Lock()
	}
	e := c.pending[o]
	if e == nil {
		e = &txnEntry{}
		c.pending[o] = e
	}
	e.off, e.records = off, e.records+records
	e.dlq, e.labels = append(e.dlq, dlq...), append(e.labels, labels...)
	e.events = append(e.events, events...)
	e.bytes += n
	c.bytes += n
	kick := len(dlq) > 0 // dead letters are committed at once, not at the interval
	c.mu.Unlock()
	if kick {
		select {
		case c.kick <- struct{}{}:
		default:
		}
	}
	return true
}

// loop commits every interval and when kicked, until ctx is done. Each
// commit may take up to txnCommitTimeout (a broker outage), and one whose
// transaction's end failed up to three txnAbortTimeout more (the abort,
// the producer's re-initialization, the read of the offsets): a revoke's
// commit waits that long for its turn at most, and gives up after
// Config.RevokeTimeout (its partitions' entries are then dropped, see
// txnOwner).
func (c *txnCommitter) loop(ctx context.Context, interval time.Duration, fatal func(error)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	failures := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-c.kick:
		}
		cctx, cancel := context.WithTimeout(ctx, txnCommitTimeout)
		err := c.commit(cctx, true)
		cancel()
		if err == nil {
			failures = 0
			continue
		}
		if stages.Classify(err).Kind == stages.KindFatal {
			fatal(err)
			return
		}
		switch {
		case ctx.Err() != nil || errors.Is(err, errReported):
		case errors.Is(err, errTxnUnsure):
			c.m.errors.WithLabelValues("commit").Inc()
			c.log.Warn("commit transaction failed and its outcome is not known yet; the next commit reads the group's offsets first, and produces its dead letters and published records again only if it was aborted", "err", err)
		default:
			c.m.errors.WithLabelValues("commit").Inc()
			c.log.Warn("commit transaction failed; its dead letters and published records were aborted and are produced again with their offsets at the next commit", "err", err)
		}
		// Failed commits back off (up to the interval, at least 2 s), not
		// to spin on the kicks of the workers' submissions.
		failures++
		pause(ctx, min(time.Duration(failures)*100*time.Millisecond, max(interval, 2*time.Second)))
	}
}

// errReported marks a periodic plain commit's failure that was already
// counted and logged (see txnCommitter.periodic).
var errReported = errors.New("reported")

// commit commits what is pending (see txnCommitter); periodic says it is
// a commit of the interval, not of a revoke or the shutdown. A transaction
// whose end failed is aborted; when the group's committed offsets then
// show it committed after all, it counts as committed.
func (c *txnCommitter) commit(ctx context.Context, periodic bool) error {
	select {
	case c.turn <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("wait for the commit under way: %w", ctx.Err())
	}
	defer func() { <-c.turn }()
	if c.open { // left open by a commit whose ctx ended
		err := c.finishAbort(ctx)
		switch {
		case err == nil:
		case errors.Is(err, kerr.ProducerFenced) || errors.Is(err, kerr.InvalidProducerEpoch):
			// The broker aborted it (transaction timeout) and bumped the
			// epoch: the client's producer id is failed for good.
			if err := c.renew(err); err != nil {
				return fmt.Errorf("dead-letter transaction left open: %w", err)
			}
		default:
			return fmt.Errorf("dead-letter transaction left open: %w", err)
		}
	}
	if err := c.resolve(ctx); err != nil {
		return err
	}
	c.mu.Lock()
	batch := c.pending
	c.pending = map[*txnOwner]*txnEntry{}
	c.bytes = 0
	c.mu.Unlock()
	var recs, events []*kgo.Record
	for o, e := range batch {
		if o.gone.Load() {
			delete(batch, o) // abandoned or lost: the next owner redoes it
			continue
		}
		recs = append(recs, e.dlq...)
		events = append(events, e.events...)
	}
	offsets := offsetsOf(batch)
	var err error
	switch {
	case len(offsets) == 0:
	case len(recs) == 0 && len(events) == 0:
		err = c.commitPlain(ctx, offsets, periodic)
	default:
		err = c.transact(ctx, batch, recs, events, offsets)
	}
	switch {
	case errors.Is(err, errTxnUnsure):
		// Neither committed nor to produce again before the outcome is
		// known: producing its dead letters again could add a second copy
		// of each to a transaction the broker committed.
		c.unsure = batch
		c.count(batch, 1)
		return err
	case err != nil:
		c.restore(batch)
		return err
	}
	c.done(batch, offsets)
	return nil
}

// offsetsOf returns the offsets batch commits: per partition, the
// highest of its entries'.
func offsetsOf(batch map[*txnOwner]*txnEntry) map[string]map[int32]kgo.EpochOffset {
	offsets := map[string]map[int32]kgo.EpochOffset{}
	for o, e := range batch {
		if offsets[o.tp.topic] == nil {
			offsets[o.tp.topic] = map[int32]kgo.EpochOffset{}
		}
		if cur, ok := offsets[o.tp.topic][o.tp.partition]; !ok || cur.Offset < e.off.Offset {
			offsets[o.tp.topic][o.tp.partition] = e.off
		}
	}
	return offsets
}

// resolve learns the outcome of the unsure transaction, if any: committed,
// its batch counts as committed; aborted, its batch goes back in front of
// the pending entries (restore). When the group's offsets cannot be read,
// it returns the error and the batch stays unsure.
func (c *txnCommitter) resolve(ctx context.Context) error {
	if c.unsure == nil {
		return nil
	}
	if err := c.fence(ctx); err != nil {
		return fmt.Errorf("%w: %w", errTxnUnsure, err)
	}
	batch, offsets := c.unsure, offsetsOf(c.unsure)
	ok, err := c.committed(ctx, batch, offsets)
	if err != nil {
		return fmt.Errorf("%w: %w", errTxnUnsure, err)
	}
	c.unsure = nil
	c.count(batch, -1) // restore counts it again; done frees it
	if !ok {
		c.restore(batch)
		return nil
	}
	c.log.Info("dead-letter transaction committed although its end reported an error")
	c.done(batch, offsets)
	return nil
}

// count adds the bytes of batch's entries, times sign, to what submit
// waits on: an unsure batch keeps counting while it waits (sign 1), and
// gives them back when resolved (sign -1).
func (c *txnCommitter) count(batch map[*txnOwner]*txnEntry, sign int64) {
	n := int64(0)
	for _, e := range batch {
		n += e.bytes
	}
	c.mu.Lock()
	c.bytes += sign * n
	c.mu.Unlock()
}

// done records batch, committed with offsets: the group client's marks,
// the committed and dead-letter metrics, and the wake-up of submitters
// waiting for room.
func (c *txnCommitter) done(batch map[*txnOwner]*txnEntry, offsets map[string]map[int32]kgo.EpochOffset) {
	// The group client's marks follow the commits (Config.StopAtEnd reads
	// them); it never commits them by itself (see Runner.Run).
	c.group.MarkCommitOffsets(offsets)
	for o, e := range batch {
		c.m.committed.WithLabelValues(o.tp.topic).Add(float64(e.records))
		for _, l := range e.labels {
			c.m.deadLettered(stages.Reason(l[0]), l[1])
		}
	}
	c.mu.Lock()
	close(c.freed)
	c.freed = make(chan struct{})
	c.mu.Unlock()
}

// restore puts the entries of a failed commit back in front of what was
// submitted meanwhile.
func (c *txnCommitter) restore(batch map[*txnOwner]*txnEntry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for o, old := range batch {
		if cur := c.pending[o]; cur != nil {
			old.off = cur.off
			old.records += cur.records
			old.dlq = append(old.dlq, cur.dlq...)
			old.labels = append(old.labels, cur.labels...)
			old.events = append(old.events, cur.events...)
			old.bytes += cur.bytes
			c.bytes -= cur.bytes
		}
		c.pending[o] = old
		c.bytes += old.bytes
	}
}

// commitPlain commits offsets with the group client; a periodic one's
// failure is reported by c.periodic and returned wrapping errReported.
func (c *txnCommitter) commitPlain(ctx context.Context, offsets map[string]map[int32]kgo.EpochOffset, periodic bool) error {
	var rerr error
	c.group.CommitOffsetsSync(ctx, offsets, func(cl *kgo.Client, req *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		if periodic {
			c.periodic(cl, req, resp, err)
		}
		if err != nil {
			rerr = err
			return
		}
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				if err := kerr.ErrorForCode(p.ErrorCode); err != nil && rerr == nil {
					rerr = fmt.Errorf("%s/%d: %w", t.Topic, p.Partition, err)
				}
			}
		}
	})
	switch {
	case rerr != nil && periodic:
		return fmt.Errorf("offset commit: %w (%w)", rerr, errReported)
	case rerr != nil:
		return fmt.Errorf("offset commit: %w", rerr)
	}
	return nil
}

// transact produces the dead letters recs and a Publisher's records
// events, and commits offsets, in one transaction. A failure before the
// end aborts it, except when ctx ended first (a broker not answering): the
// transaction is then left open, for the next commit to abort
// (finishAbort) or, if the process ends first, for the broker to abort
// after the transaction timeout; nothing of it is visible either way. A
// failed end is always followed by an abort, a new initialization of the
// producer (fence) and a check of the group's offsets on the partitions
// batch still owns (each bounded, even when ctx ended): the broker may
// have committed it, and then it counts as committed.
func (c *txnCommitter) transact(ctx context.Context, batch map[*txnOwner]*txnEntry, recs, events []*kgo.Record,
	offsets map[string]map[int32]kgo.EpochOffset) error {
	if err := c.cl.BeginTransaction(); err != nil {
		// The producer id failed for good (see renew); the next commit
		// goes through a new client.
		if rerr := c.renew(err); rerr != nil {
			return fmt.Errorf("begin transaction: %w", rerr)
		}
		return fmt.Errorf("begin transaction: %w", err)
	}
	c.open = true
	if err := c.produce(ctx, recs, events); err != nil {
		return c.abort(ctx, err)
	}
	if err := c.commitOffsets(ctx, offsets); err != nil {
		return c.abort(ctx, err)
	}
	err := c.cl.EndTransaction(ctx, kgo.TryCommit)
	if err == nil {
		c.open = false
		return nil
	}
	// The commit may have reached the broker although its answer did not
	// reach this member (ctx ended by a stop or a revoke, a lost response):
	// the abort and the check of the offsets run even when ctx is done
	// (each bounded), or the commit would be retried with the same records
	// and a committed transaction would get a second copy of them.
	dctx := context.WithoutCancel(ctx)
	err = c.abort(dctx, fmt.Errorf("end transaction: %w", err))
	if c.open { // the abort failed too: the outcome is unknown
		return fmt.Errorf("%w: %w", errTxnUnsure, err)
	}
	// kgo's abort after an end of unknown outcome reports success even
	// when the re-initialization of the producer, which completes the
	// transaction, failed: the offsets tell the outcome only after one
	// succeeded (fence).
	if ferr := c.fence(dctx); ferr != nil {
		return fmt.Errorf("%w: %w; %w", errTxnUnsure, err, ferr)
	}
	ok, ferr := c.committed(dctx, batch, offsets)
	switch {
	case ferr != nil:
		return fmt.Errorf("%w: %w; %w", errTxnUnsure, err, ferr)
	case ok:
		c.log.Info("dead-letter transaction committed although its end reported an error", "err", err)
		return nil
	}
	return err
}

// abort aborts the open transaction after cause (unless ctx ended) and
// returns cause, with the abort's error if it failed too.
func (c *txnCommitter) abort(ctx context.Context, cause error) error {
	if ctx.Err() != nil {
		return cause
	}
	if err := c.finishAbort(ctx); err != nil {
		return fmt.Errorf("%w; abort: %w", cause, err)
	}
	return cause
}

// finishAbort aborts the open transaction, within txnAbortTimeout.
func (c *txnCommitter) finishAbort(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, txnAbortTimeout)
	defer cancel()
	if err := c.cl.AbortBufferedRecords(ctx); err != nil {
		return fmt.Errorf("abort buffered dead letters: %w", err)
	}
	if err := c.cl.EndTransaction(ctx, kgo.TryAbort); err != nil {
		return fmt.Errorf("abort transaction: %w", err)
	}
	c.open = false
	return nil
}

// produce produces the dead letters recs and the published records events
// in the open transaction; a dead letter the DLQ topic refuses as too large
// goes as its stub (produceDeadLetter), a published record refused as too
// large is a fatal error. Any other failure fails the transaction: kgo
// would commit it without the failed records.
func (c *txnCommitter) produce(ctx context.Context, recs, events []*kgo.Record) error {
	errs, err := c.send(ctx, append(append(make([]*kgo.Record, 0, len(recs)+len(events)), recs...), events...))
	if err != nil {
		return err
	}
	for i, err := range errs {
		switch {
		case err == nil:
		case i >= len(recs) && tooLarge(err):
			return errEventTooLarge(events[i-len(recs)], err)
		case i >= len(recs):
			return fmt.Errorf("produce published records to %s: %w", events[i-len(recs)].Topic, err)
		case tooLarge(err):
			if err := produceDeadLetter(ctx, c.cl, c.log, c.dlqTopic, recs[i], func(rec *kgo.Record) error {
				errs, err := c.send(ctx, []*kgo.Record{rec})
				if err != nil {
					return err
				}
				return errs[0]
			}); err != nil {
				return err
			}
		default:
			return fmt.Errorf("produce dead letters to %s: %w", c.dlqTopic, err)
		}
	}
	return nil
}

// send produces recs in the open transaction and returns the outcome of
// each (nil: acknowledged), or ctx's error as soon as ctx ends, even with
// produces still in flight (a broker not answering).
func (c *txnCommitter) send(ctx context.Context, recs []*kgo.Record) ([]error, error) {
	type result struct {
		i   int
		err error
	}
	results := make(chan result, len(recs))
	for i, rec := range recs {
		rec.Context = nil // kgo keeps the ctx of an earlier (aborted) produce of rec, and would fail it with that ctx's end
		c.cl.Produce(ctx, rec, func(_ *kgo.Record, err error) { results <- result{i, err} })
	}
	errs := make([]error, len(recs))
	for range recs {
		select {
		case res := <-results:
			errs[res.i] = res.err
		case <-ctx.Done():
			return nil, fmt.Errorf("produce in the commit transaction (dead letters to %s): %w", c.dlqTopic, ctx.Err())
		}
	}
	return errs, nil
}

// commitOffsets adds the group's offsets to the open transaction
// (AddOffsetsToTxn, then TxnOffsetCommit with the member's id and
// generation).
func (c *txnCommitter) commitOffsets(ctx context.Context, offsets map[string]map[int32]kgo.EpochOffset) error {
	pid, epoch, err := c.cl.ProducerID(ctx)
	if err != nil {
		return fmt.Errorf("producer id: %w", err)
	}
	add := kmsg.NewPtrAddOffsetsToTxnRequest()
	add.TransactionalID, add.ProducerID, add.ProducerEpoch, add.Group = c.txnID, pid, epoch, c.groupID
	if err := retryConcurrent(ctx, func() error {
		resp, err := add.RequestWith(ctx, c.cl)
		if err != nil {
			return err
		}
		return kerr.ErrorForCode(resp.ErrorCode)
	}); err != nil {
		return fmt.Errorf("add offsets to transaction: %w", err)
	}
	member, gen := c.group.GroupMetadata()
	req := kmsg.NewPtrTxnOffsetCommitRequest()
	req.TransactionalID, req.Group, req.ProducerID, req.ProducerEpoch = c.txnID, c.groupID, pid, epoch
	req.Generation, req.MemberID = gen, member
	for topic, ps := range offsets {
		t := kmsg.NewTxnOffsetCommitRequestTopic()
		t.Topic = topic
		for p, o := range ps {
			rp := kmsg.NewTxnOffsetCommitRequestTopicPartition()
			rp.Partition, rp.Offset, rp.LeaderEpoch = p, o.Offset, o.Epoch
			t.Partitions = append(t.Partitions, rp)
		}
		req.Topics = append(req.Topics, t)
	}
	return retryConcurrent(ctx, func() error {
		resp, err := req.RequestWith(ctx, c.cl)
		if err != nil {
			return fmt.Errorf("transactional offset commit: %w", err)
		}
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
					return fmt.Errorf("transactional offset commit of %s/%d (generation %d): %w", t.Topic, p.Partition, gen, err)
				}
			}
		}
		return nil
	})
}

// retryConcurrent runs fn again while the coordinator answers that an
// earlier transaction is still completing or that it is moving.
func retryConcurrent(ctx context.Context, fn func() error) error {
	for attempt := 1; ; attempt++ {
		err := fn()
		if err == nil || attempt == 20 || !(errors.Is(err, kerr.ConcurrentTransactions) ||
			errors.Is(err, kerr.CoordinatorLoadInProgress) || errors.Is(err, kerr.NotCoordinator) || errors.Is(err, kerr.CoordinatorNotAvailable)) {
			return err
		}
		pause(ctx, time.Duration(attempt)*20*time.Millisecond)
		if ctx.Err() != nil {
			return err
		}
	}
}

// fence makes sure that the producer was initialized again since a
// transaction's end failed, within txnAbortTimeout: the coordinator
// answers the initialization only once that transaction is complete
// (committed or aborted, its offsets applied or dropped; until then
// CONCURRENT_TRANSACTIONS), so that the group's offsets tell its outcome.
// A producer id failed for good is replaced (renew): the new client's
// initialization completes the transaction as well.
func (c *txnCommitter) fence(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, txnAbortTimeout)
	defer cancel()
	_, _, err := c.cl.ProducerID(ctx)
	var ke *kerr.Error
	if err != nil && errors.As(err, &ke) && !ke.Retriable && !errors.Is(err, kerr.ConcurrentTransactions) {
		if rerr := c.renew(err); rerr != nil {
			return fmt.Errorf("initialize the dead-letter producer: %w", rerr)
		}
		_, _, err = c.cl.ProducerID(ctx)
	}
	if err != nil {
		return fmt.Errorf("initialize the dead-letter producer: %w", err)
	}
	return nil
}

// committed reports whether the transaction that committed offsets for
// batch was committed: whether the group's committed offsets are offsets
// on every partition batch still owns, within txnAbortTimeout; an error
// when they cannot be read. A partition whose owner is gone is left out:
// its next owner may have committed it further meanwhile, and it would
// make a committed transaction look aborted (and its dead letters of the
// partitions still owned be produced a second time). With no partition
// still owned, every partition counts: the batch's entries are dropped
// either way, and the outcome only decides whether its dead letters are
// counted in the metrics.
func (c *txnCommitter) committed(ctx context.Context, batch map[*txnOwner]*txnEntry, offsets map[string]map[int32]kgo.EpochOffset) (bool, error) {
	owned := map[tp]bool{}
	for o := range batch {
		if !o.gone.Load() {
			owned[o.tp] = true
		}
	}
	ctx, cancel := context.WithTimeout(ctx, txnAbortTimeout)
	defer cancel()
	got, err := kadm.NewClient(c.cl).FetchOffsets(ctx, c.groupID)
	if err == nil {
		err = got.Error()
	}
	if err != nil {
		return false, fmt.Errorf("fetch the group's offsets: %w", err)
	}
	for topic, ps := range offsets {
		for p, o := range ps {
			if len(owned) > 0 && !owned[tp{topic, p}] {
				continue
			}
			if r, ok := got.Lookup(topic, p); !ok || r.At != o.Offset {
				return false, nil
			}
		}
	}
	return true, nil
}
