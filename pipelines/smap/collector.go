package smap

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"
	"unicode"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/sinks/objstore"
	"github.com/sluicehq/sluice/stages"
	"github.com/sluicehq/sluice/stages/progress"
)

// collector handles smap.project.created: it initialises the project's
// progress, crawls every target, stores each item's raw JSON, journals the
// items (crawlJournal) and grows the total by them, seals the total and
// returns one announcement per journaled item, which the runtime publishes
// on smap.data.collected (announcer) in the transaction that commits the
// record's offset. The whole crawl of a project is one stage call: a crash
// re-runs it (deterministic item ids and object keys; the journal keeps
// the items of the interrupted crawl), and only the announcements of the
// delivery that committed are visible to read_committed readers. A
// project's announcements are built from the journal at the seal and
// produced in one transaction (a few hundred bytes each; the runtime
// counts them in its memory budget until the commit).
type collector struct {
	cfg     Config
	tr      *progress.Tracker
	objects objstore.Store
	comp    *completer
	m       *metrics
	log     *slog.Logger
}

// emitError marks a failure of the collector's own effects (object store,
// Redis, Kafka) inside a crawl, as opposed to a failure of the crawl.
type emitError struct{ err error }

func (e *emitError) Error() string { return e.err.Error() }
func (e *emitError) Unwrap() error { return e.err }

// unstorableError marks an item whose object key, derived from its
// platform, objstore.ValidKey refuses (a platform slug so long that the
// object name exceeds objstore.MaxSegmentLen): no store can hold it and
// no retry helps. It fails the item's target permanently — the target is
// skipped like one that cannot be crawled — rather than the project.
type unstorableError struct{ err error }

func (e *unstorableError) Error() string { return e.err.Error() }
func (e *unstorableError) Unwrap() error { return e.err }

func decodeProjectCreated(_, value []byte) (Event[ProjectCreated], error) {
	e, err := DecodeProjectCreated(value)
	if err != nil {
		return e, stages.DeadLetter(stages.ReasonDecodeError, "", err)
	}
	return e, nil
}

func (c *collector) timed(op string, start time.Time) {
	c.m.stateWrites.WithLabelValues(op).Observe(time.Since(start).Seconds())
}

// RuleProjectID is the dlq.rule of a project.created event whose
// project_id the collector refuses (reason sanity_fail).
const RuleProjectID = "smap.project_id"

// maxProjectIDLen bounds a project id in bytes: escaped in the meta
// object's name (up to 3 bytes per byte) it must stay a valid file name
// (255 bytes) and S3 key.
const maxProjectIDLen = 80

// checkProjectID refuses a project id that some store downstream cannot
// hold: too long for an object name, with control characters (NUL is
// refused by PostgreSQL and would stop the analytics partition), or one
// the progress tracker refuses (progress.CheckJobID: ending in ":items" or
// ":found", whose progress hash would be another project's set).
func checkProjectID(id string) error {
	if err := progress.CheckJobID(id); err != nil {
		return err
	}
	if len(id) > maxProjectIDLen {
		return fmt.Errorf("project_id of %d bytes: want at most %d", len(id), maxProjectIDLen)
	}
	if strings.IndexFunc(id, unicode.IsControl) >= 0 {
		return fmt.Errorf("project_id %q contains a control character", id)
	}
	return nil
}

func (c *collector) stage(ctx context.Context, m stages.Msg[Event[ProjectCreated]]) ([]collected, error) {
	p := m.Value.Payload
	id := p.ProjectID
	if err := checkProjectID(id); err != nil {
		return nil, stages.DeadLetter(stages.ReasonSanityFail, RuleProjectID, err)
	}
	// A project whose completion is recorded in its meta object was
	// published as completed: when its progress state has expired (a
	// replay of project.created after the TTL), Init would start it over,
	// re-crawl it and publish a second completion.
	pm, err := readMeta(ctx, c.objects, id)
	if err != nil {
		return nil, storeRetry("project meta "+id, err)
	}
	if !pm.CompletedAt.IsZero() {
		c.m.projects.WithLabelValues("skipped_done").Inc()
		return nil, nil
	}
	t0 := time.Now()
	st, err := c.tr.Init(ctx, id)
	c.timed("init", t0)
	if err != nil {
		return nil, stages.Retry(err)
	}
	prev := (*crawlProgress)(nil)
	switch {
	case st.Status == progress.StatusDone:
		c.m.projects.WithLabelValues("skipped_done").Inc()
		return nil, nil
	case errors.As(m.PrevErr, &prev):
	case st.Sealed:
		return c.resealed(ctx, m, pm, st)
	}
	// An earlier attempt of this record that failed only on transient
	// crawl errors left its progress: only its failed targets are crawled
	// again.
	prog := prev
	if prog == nil {
		if err := updateMeta(ctx, c.objects, id, func(pm *projectMeta) { pm.Keywords = p.Keywords }); err != nil {
			return nil, storeRetry("project meta "+id, err)
		}
		if _, err := c.tr.Start(ctx, id); err != nil {
			return nil, stages.Retry(err)
		}
		c.log.Info("crawl started", "project_id", id, "targets", len(p.Targets))
		prog = &crawlProgress{done: map[int]bool{}}
	}
	// emit stores one item of target and adds it to *found. An item whose
	// key no store can hold is refused with an unstorableError, also
	// recorded in *unstorable, and an item the store failed to take with an
	// emitError, also recorded in *failed, so that a crawler that ignores
	// emit errors still fails its target (and the attempt).
	emit := func(target Target, found *[]journalEntry, unstorable, failed *error) func(Item) error {
		return func(it Item) error {
			platform := it.Platform
			if platform == "" {
				platform = target.Platform
			}
			itemID := ItemID(id, platform, it.SourceID)
			key := ObjectKey(platform, itemID)
			if err := objstore.ValidKey(key); err != nil {
				err = &unstorableError{fmt.Errorf("item %s of a platform of %d bytes: %w", clipKey(itemID), len(platform), err)}
				*unstorable = err
				return err
			}
			now := c.cfg.Now().UTC()
			it.Platform = platform
			raw, err := json.Marshal(RawItem{ItemID: itemID, ProjectID: id, CrawledAt: now, Item: it})
			if err != nil {
				return &emitError{fmt.Errorf("encode item %s: %w", itemID, err)}
			}
			if err := c.objects.Put(ctx, key, raw, "application/json"); err != nil {
				err := &emitError{fmt.Errorf("store item %s: %w", itemID, err)}
				*failed = err
				return err
			}
			*found = append(*found, journalEntry{ItemID: itemID, Platform: platform, ObjectKey: key, CrawledAt: now})
			c.m.collected.WithLabelValues(c.m.platform(platform)).Inc()
			return nil
		}
	}
	// record journals the items a target yielded, then counts them in the
	// total: the total never counts an item the journal lacks.
	record := func(found []journalEntry) error {
		if len(found) == 0 {
			return nil
		}
		if _, err := addToJournal(ctx, c.objects, id, found); err != nil {
			return storeRetry("crawl journal of project "+id, err)
		}
		ids := make([]string, len(found))
		for i, e := range found {
			ids[i] = e.ItemID
		}
		t0 := time.Now()
		_, err := c.tr.Discover(ctx, id, ids...)
		c.timed("discover", t0)
		if err != nil {
			return stages.Retry(err)
		}
		return nil
	}
	// A target failing transiently makes this attempt a retry (once the
	// other targets were crawled) that crawls it again, until
	// CrawlRetry.MaxAttempts or the record's last attempt; from then on it
	// is skipped like one failing permanently.
	var retry []error
	var after time.Duration // the longest wait the transient failures asked for
	for i, tg := range p.Targets {
		if prog.done[i] {
			continue
		}
		var unstorable, failed error
		var found []journalEntry
		err := crawlTarget(ctx, c.cfg.Crawler, p, tg, emit(tg, &found, &unstorable, &failed))
		if failed != nil && err == nil {
			err = failed // the crawler ignored the store's failure
		}
		var ee *emitError
		switch {
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case errors.Is(err, stages.ErrStopped):
			// The crawler gave up because the partition is stopping: not
			// the target's failure. The record is left for the next owner,
			// which crawls the project again.
			return nil, fmt.Errorf("project %s: %w", id, err)
		case errors.As(err, &ee):
			return nil, storeRetry("raw objects of project "+id, fmt.Errorf("project %s: %w", id, ee.err))
		}
		// The items found before a failure are stored: they count.
		if err := record(found); err != nil {
			return nil, err
		}
		switch {
		case err == nil && unstorable == nil:
			prog.done[i] = true
			continue
		case err == nil:
			err = unstorable
		}
		if a, ok := transientCrawl(err); ok && unstorable == nil && c.crawlAgain(m) {
			c.m.crawlRetry.WithLabelValues(c.m.platform(tg.Platform)).Inc()
			c.log.Warn("crawl of target failed, retrying", "project_id", id, "platform", tg.Platform,
				"attempt", m.Attempt, "max_attempts", c.cfg.CrawlRetry.MaxAttempts, "err", err)
			retry = append(retry, fmt.Errorf("target %s %.200q: %w", tg.Platform, tg.URL, err))
			after = max(after, a)
			continue
		}
		prog.done[i] = true
		prog.skipped = append(prog.skipped, skippedTarget{tg, err})
	}
	if len(retry) > 0 {
		pol := c.cfg.CrawlRetry
		wait := min(max(pol.Backoff(m.Attempt), after), pol.Max)
		prog.err = fmt.Errorf("project %s: %d target(s) failed transiently at attempt %d: %w", id, len(retry), m.Attempt, errors.Join(retry...))
		return nil, stages.RetryAfter(wait, prog)
	}
	// A target that cannot be crawled (a permanent error or a panic of the
	// crawler, a transient error up to its last attempt, or an item whose
	// object key no store can hold) is skipped: the project completes with
	// what the other targets yielded.
	for _, s := range prog.skipped {
		c.m.crawlErrors.WithLabelValues(c.m.platform(s.target.Platform)).Inc()
		c.log.Warn("crawl of target failed", "project_id", id, "platform", s.target.Platform, "attempts", m.Attempt, "err", s.err)
	}
	// The journal holds this crawl's items and those of every earlier,
	// interrupted one (their objects are stored and they may be counted
	// already): the project is sealed with all of them, before their
	// announcements are visible (no item can be counted before its
	// announcement, so the completion cannot be decided early), and a
	// crash before those are committed redelivers this record
	// (resealed).
	j, err := readJournal(ctx, c.objects, id)
	if err != nil {
		return nil, storeRetry("crawl journal of project "+id, err)
	}
	outs, err := j.announcements(p.Keywords)
	if err != nil {
		return nil, err
	}
	total := int64(len(outs))
	if err := updateMeta(ctx, c.objects, id, func(pm *projectMeta) {
		pm.Total, pm.SealedAt, pm.SealedBy = total, c.cfg.Now().UTC(), sealer(m.Source)
	}); err != nil {
		return nil, storeRetry("project meta "+id, err)
	}
	t0 = time.Now()
	d, err := c.tr.SealExact(ctx, id, total)
	c.timed("seal", t0)
	if err != nil {
		return nil, stages.Retry(err)
	}
	c.log.Info("crawl sealed", "project_id", id, "total", d.Total, "done", d.Done)
	if outs, err = c.sealedItems(ctx, id, p.Keywords, outs, d.Total); err != nil {
		return nil, err
	}
	if d.Publish {
		if err := c.comp.complete(ctx, d); err != nil {
			return nil, stages.Retry(err)
		}
	}
	c.m.projects.WithLabelValues("crawled").Inc()
	return outs, nil
}

// resealed handles a project.created record of a sealed project. The
// record that sealed it, delivered again (the transaction that was to
// commit its offset with the announcements aborted: a kill -9, a fenced or
// failed commit), or re-driven from the DLQ (stages.HeaderOrigin names it:
// a last attempt that failed after the seal; it becomes the sealing
// record), announces the sealed items of the journal again, without
// crawling; another record (a duplicate, or a duplicate's dead letter
// re-driven) announces nothing: the sealing record's announcements are
// committed with it. Either publishes a pending completion.
func (c *collector) resealed(ctx context.Context, m stages.Msg[Event[ProjectCreated]], pm projectMeta, st progress.State) ([]collected, error) {
	id := m.Value.Payload.ProjectID
	d, err := c.tr.Seal(ctx, id, st.Total)
	if err != nil {
		return nil, stages.Retry(err)
	}
	if d.Publish {
		if err := c.comp.complete(ctx, d); err != nil {
			return nil, stages.Retry(err)
		}
	}
	self := sealer(m.Source)
	origin, _ := m.Header(stages.HeaderOrigin) // the record first dead-lettered, when re-driven
	if pm.SealedBy != self && (pm.SealedBy == "" || pm.SealedBy != string(origin)) {
		c.m.projects.WithLabelValues("resealed").Inc()
		return nil, nil
	}
	if pm.SealedBy != self {
		// The sealing record re-driven: from now on this record is the
		// sealing one, so that a second redrive of its dead letter
		// announces nothing once this one's announcements committed.
		if err := updateMeta(ctx, c.objects, id, func(pm *projectMeta) { pm.SealedBy = self }); err != nil {
			return nil, storeRetry("project meta "+id, err)
		}
	}
	outs, err := c.sealedItems(ctx, id, m.Value.Payload.Keywords, nil, d.Total)
	if err != nil {
		return nil, err
	}
	c.log.Info("sealed project announced again", "project_id", id, "items", len(outs))
	c.m.projects.WithLabelValues("reannounced").Inc()
	return outs, nil
}

// sealedItems returns the announcements of a project sealed at total: the
// first total of outs, the journal's (read again when outs is shorter).
// Journal order is the order items were first journaled: a journal longer
// than the total has items a member that had lost the partition journaled
// after the seal. A journal shorter than the total cannot be made whole
// (that member's write replaced one that had items it lacked): logged.
func (c *collector) sealedItems(ctx context.Context, id string, keywords []string, outs []collected, total int64) ([]collected, error) {
	if int64(len(outs)) < total {
		// Not read yet, or read before another writer (a member that lost
		// the partition and has not stopped yet) journaled more items and
		// sealed the project with them first.
		j, err := readJournal(ctx, c.objects, id)
		if err != nil {
			return nil, storeRetry("crawl journal of project "+id, err)
		}
		if outs, err = j.announcements(keywords); err != nil {
			return nil, err
		}
	}
	switch {
	case int64(len(outs)) > total:
		c.log.Warn("crawl journal holds items beyond the sealed total: not announced", "project_id", id, "journal", len(outs), "total", total)
		return outs[:total], nil
	case int64(len(outs)) < total:
		c.log.Error("crawl journal lacks items of the sealed total: those cannot be announced", "project_id", id, "journal", len(outs), "total", total)
	}
	return outs, nil
}

// sealer names the project.created record at src in a project's meta
// object (projectMeta.SealedBy).
func sealer(src stages.Source) string {
	return stages.Origin(src.Topic, src.Partition, src.Offset)
}

// skippedTarget is a target whose crawl failed for good, with its error.
type skippedTarget struct {
	target Target
	err    error
}

// crawlProgress is the error of an attempt of the collector's stage that
// failed only on transient crawl errors (err): it carries the attempt's
// progress to the next attempt of the record (stages.Msg.PrevErr), which
// crawls only the targets not done. The items of every attempt are in the
// project's crawl journal.
type crawlProgress struct {
	done    map[int]bool    // indexes into Targets crawled, or skipped for good
	skipped []skippedTarget // targets skipped for good so far, in order
	err     error
}

func (p *crawlProgress) Error() string { return p.err.Error() }
func (p *crawlProgress) Unwrap() error { return p.err }

// crawlAgain reports whether a target failing transiently at m's attempt
// is crawled again at the next attempt: below CrawlRetry.MaxAttempts and
// unless m is the record's last attempt (the runtime would dead-letter
// project.created instead of completing the project without the target).
func (c *collector) crawlAgain(m stages.Msg[Event[ProjectCreated]]) bool {
	return m.Attempt < c.cfg.CrawlRetry.MaxAttempts && !m.LastAttempt()
}

// transientCrawl reports whether a crawl error is transient (classified
// with stages.Retry or stages.RetryAfter) and the least wait it asks for.
// An unclassified error is permanent: unlike the runtime, which retries
// unclassified stage errors, the collector cannot tell a page that will
// never load from one that may.
func transientCrawl(err error) (time.Duration, bool) {
	var se *stages.Error
	if errors.As(err, &se) && se.Kind == stages.KindRetry {
		return se.After, true
	}
	return 0, false
}

// crawlTarget runs one target's crawl, turning a panic of the crawler into
// an error of that target. A panic is a bug of the crawler, not of the
// project: left to the runtime, it would dead-letter the project.created
// record and leave the project CRAWLING forever, its total never sealed.
// A panic raised by emit itself (the collector's own effects) is not
// recovered here.
func crawlTarget(ctx context.Context, cr Crawler, p ProjectCreated, tg Target, emit func(Item) error) (err error) {
	inEmit := false
	guarded := func(it Item) error {
		inEmit = true
		err := emit(it)
		inEmit = false // not deferred: a panic of emit must leave it set
		return err
	}
	defer func() {
		if r := recover(); r != nil {
			if inEmit {
				panic(r)
			}
			err = fmt.Errorf("crawler panicked on target %s %.200q: %v", tg.Platform, tg.URL, r)
		}
	}()
	return cr.Crawl(ctx, p, tg, guarded)
}

// collected is an item's announcement: its encoded data.collected event.
type collected struct {
	item  string
	value []byte
}

// announcer is the collector's sink: the items are already stored, so
// Write has nothing to do, and Records (run.Publisher) hands the runtime
// their data.collected records, which it produces in the Kafka transaction
// that commits the project.created record's offset: a read_committed
// reader (the analytics service) sees each item announced once per
// committed crawl, across kill -9 and rebalances mid-crawl.
type announcer struct{ topic string }

func (announcer) Write(context.Context, []collected) error { return nil }

func (a announcer) Records(written []collected) []*kgo.Record {
	recs := make([]*kgo.Record, len(written))
	for i, c := range written {
		recs[i] = &kgo.Record{Topic: a.topic, Key: []byte(c.item), Value: c.value}
	}
	return recs
}
