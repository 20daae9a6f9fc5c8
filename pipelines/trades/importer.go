package trades

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/sinks/pgsink"
	"github.com/sluicehq/sluice/stages"
	"github.com/sluicehq/sluice/stages/run"
)

// HeaderRejectedFrom marks the one-trade push a bad trade of an import page
// is re-sent as (value: the import id of the page). When that push's trade
// fails its rule again, the push is dead-lettered without being counted
// again as a rejected trade (the page counted it).
const HeaderRejectedFrom = "trades.rejected_from"

// importer is the trades-import stage. It owns the import states of its
// partitions of trades.import (the runtime's state store, changelog
// trades.import.state, keyed by import_id in the user's partition) and is
// their only writer. A page's trades are upserted in one Postgres
// transaction by the stage itself, before its outputs (events, the next
// page) are handed to the sink, so that a failed transaction decides the
// page's fate (a wait, or the run failing) before any event or state says
// the page was done. Partitions are processed concurrently, each in offset
// order; every method is safe for that.
type importer struct {
	cfg     ImportConfig
	db      importDB
	states  *run.Store[ImportState]
	brokers map[string]BrokerAdapter
	m       *importMetrics
	log     *slog.Logger
}

type importStates = *run.Partition[ImportState]

// rawValue is the service's decoder: the record's value as it is.
// Commands are decoded by the stage (DecodeCommand), so that a record that
// does not decode is dead-lettered with dlq.stage trades-import like every
// other failure of the service (the runtime would name its decoder's
// failures trades-import/decode).
func rawValue(_, value []byte) ([]byte, error) { return value, nil }

// stage is the service's stage function: one import, push or page command.
func (im *importer) stage(ctx context.Context, raw stages.Msg[[]byte]) ([]*kgo.Record, error) {
	c, err := DecodeCommand(nil, raw.Value)
	if err != nil {
		return nil, err
	}
	m := stages.Msg[Command]{Key: raw.Key, Value: c, Headers: raw.Headers, Source: raw.Source,
		Attempt: raw.Attempt, MaxAttempts: raw.MaxAttempts, PrevErr: raw.PrevErr}
	states, err := im.states.Of(ctx)
	if err != nil {
		return nil, err
	}
	now := im.cfg.Now().UTC()
	switch c.Kind {
	case KindImport:
		return im.onImport(ctx, states, m, *c.Import, now)
	case KindPush:
		return im.onPush(ctx, states, m, *c.Push, now)
	case KindPage:
		return im.onPage(ctx, states, m, *c.Page, now)
	}
	return nil, stages.DeadLetter(stages.ReasonUnknownTaskType, "", fmt.Errorf("trades command: unknown kind %q", clip(c.Kind)))
}

// redelivered reports whether the record at offset is the one that last
// moved st (st.ChainOffset): its effects on the state are durable, but the
// crash that redelivered it may have lost what it chained.
func redelivered(st ImportState, ok bool, offset int64) bool {
	return ok && st.RunID != "" && st.ChainOffset == offset
}

// resend re-sends what the record that last moved st chained: the next
// page of a RUNNING run, else the run's import.completed or import.failed
// (same event id). A copy of the re-sent page is dropped like any other
// duplicate: it is not at ChainOffset and its page is not state.page+1.
func (im *importer) resend(p int32, st ImportState) ([]*kgo.Record, error) {
	im.log.Info("redelivered trades command re-sends its successor", "import_id", st.ImportID, "run_id", st.RunID, "status", st.Status, "page", st.Page)
	switch st.Status {
	case StatusRunning:
		rec, err := im.pageRecord(p, st)
		if err != nil {
			return nil, err
		}
		return []*kgo.Record{rec}, nil
	case StatusCompleted:
		rec, err := im.completedEvent(st)
		if err != nil {
			return nil, err
		}
		return []*kgo.Record{rec}, nil
	case StatusFailed:
		rec, err := im.failedEvent(st)
		if err != nil {
			return nil, err
		}
		return []*kgo.Record{rec}, nil
	}
	return nil, nil
}

// deduped reports whether a new run of the import st stands for must be
// dropped: a run is RUNNING (dropped), or COMPLETED less than the dedupe
// window ago and force is not set (dropped as deduped).
func (im *importer) deduped(st ImportState, ok, force bool, now time.Time) bool {
	if !ok {
		return false
	}
	switch {
	case st.Status == StatusRunning:
		im.log.Info("import already running: command dropped", "import_id", st.ImportID, "run_id", st.RunID, "page", st.Page)
		return true
	case st.Status == StatusCompleted && !force && st.CompletedAt != nil && now.Sub(*st.CompletedAt) < im.cfg.DedupeWindow:
		im.m.imports.WithLabelValues("deduped").Inc()
		im.log.Info("import completed within the dedupe window: command dropped", "import_id", st.ImportID, "run_id", st.RunID, "completed_at", st.CompletedAt)
		return true
	}
	return false
}

func (im *importer) newRun(st ImportState, offset int64, now time.Time) ImportState {
	st.RunID, st.Status, st.ChainOffset = uuid.NewString(), StatusRunning, offset
	st.StartedAt, st.UpdatedAt = now, now
	return st
}

// onImport starts a run of an import command: a new run_id, RUNNING, and
// page 1 chained.
func (im *importer) onImport(ctx context.Context, states importStates, m stages.Msg[Command], c ImportCommand, now time.Time) ([]*kgo.Record, error) {
	if err := c.Validate(m.Key, now); err != nil {
		return nil, err
	}
	id := c.ImportID()
	cur, ok := states.Get(id)
	if redelivered(cur, ok, m.Source.Offset) {
		return im.resend(states.Partition(), cur)
	}
	if im.deduped(cur, ok, c.Force, now) {
		return nil, nil
	}
	st := im.newRun(ImportState{ImportID: id, UserID: c.UserID, Kind: KindImport, Broker: c.Broker, Since: c.Since, Options: c.Options}, m.Source.Offset, now)
	if NeedsConnection(c.Broker) {
		if _, err := im.connection(ctx, st); err != nil {
			return im.failOrReturn(states, st, err, now)
		}
	}
	if err := im.put(states, st); err != nil {
		return nil, err
	}
	im.m.imports.WithLabelValues("started").Inc()
	rec, err := im.pageRecord(states.Partition(), st)
	if err != nil {
		return nil, err
	}
	return []*kgo.Record{rec}, nil
}

// onPush stores a push's trades as the one page of a run.
func (im *importer) onPush(ctx context.Context, states importStates, m stages.Msg[Command], c PushCommand, now time.Time) ([]*kgo.Record, error) {
	items, err := c.Validate(m.Key)
	if err != nil {
		return nil, err
	}
	id := c.ImportID()
	cur, ok := states.Get(id)
	if redelivered(cur, ok, m.Source.Offset) {
		return im.resend(states.Partition(), cur)
	}
	if im.deduped(cur, ok, false, now) {
		return nil, nil
	}
	raws := make([]RawTrade, len(items))
	for i, it := range items {
		raws[i] = RawTradeFrom(it)
	}
	if len(raws) == 1 {
		// A one-trade push whose trade fails is dead-lettered as it is: it
		// already is the redrivable one-trade push.
		if _, err := raws[0].Normalize(c.UserID, c.Broker, now); err != nil {
			if _, ok := m.Header(HeaderRejectedFrom); !ok {
				im.m.trades.WithLabelValues(c.Broker, "rejected").Inc()
			}
			return nil, err
		}
	}
	st := im.newRun(ImportState{ImportID: id, UserID: c.UserID, Kind: KindPush, Broker: c.Broker, Since: pushSince(c, raws, now)}, m.Source.Offset, now)
	out, err := im.storePage(ctx, states, st, 1, Page{Trades: raws}, m.Source.Offset, now)
	if err == nil || stages.Classify(err).Kind == stages.KindDeadLetter {
		im.m.imports.WithLabelValues("started").Inc() // once: a wait calls the stage again
	}
	return out, err
}

// pushSince is the since of a push's run, which its import.completed
// carries to trades-score: the UTC date of its earliest valid trade, or
// now's when it has none.
func pushSince(c PushCommand, raws []RawTrade, now time.Time) string {
	since := now.UTC()
	for _, raw := range raws {
		if t, err := raw.Normalize(c.UserID, c.Broker, now); err == nil && t.TS.Before(since) {
			since = t.TS.UTC()
		}
	}
	return since.Format(time.DateOnly)
}

// onPage runs one page of a RUNNING run: fenced by run_id and page =
// state.page + 1; paused until not_before; fetched, validated and stored.
func (im *importer) onPage(ctx context.Context, states importStates, m stages.Msg[Command], c PageCommand, now time.Time) ([]*kgo.Record, error) {
	if err := c.Validate(m.Key); err != nil {
		return nil, err
	}
	st, ok := states.Get(c.ImportID)
	if redelivered(st, ok, m.Source.Offset) {
		return im.resend(states.Partition(), st)
	}
	switch {
	case !ok || st.RunID != c.RunID || st.Status != StatusRunning:
		im.log.Debug("page of another or a finished run dropped", "import_id", c.ImportID, "run_id", c.RunID, "page", c.Page)
		return nil, nil
	case c.Page != st.Page+1:
		im.log.Debug("page out of sequence dropped", "import_id", c.ImportID, "run_id", c.RunID, "page", c.Page, "state_page", st.Page)
		return nil, nil
	case c.NotBefore != nil && now.Before(*c.NotBefore):
		return nil, stages.Wait(c.NotBefore.Sub(now), fmt.Errorf("page %d of import %s waits for the broker's rate-limit reset at %s", c.Page, c.ImportID, c.NotBefore.Format(time.RFC3339Nano)))
	}
	page, err := im.fetch(ctx, st)
	if err != nil {
		return im.fetchFailed(ctx, states, m, st, err, now)
	}
	return im.storePage(ctx, states, st, c.Page, page, m.Source.Offset, now)
}

// fetch asks the run's broker for its next page, opening the access token
// of a broker that needs a connection.
func (im *importer) fetch(ctx context.Context, st ImportState) (Page, error) {
	adapter, ok := im.brokers[st.Broker]
	if !ok {
		return Page{}, stages.DeadLetter(stages.ReasonSanityFail, RuleBroker, fmt.Errorf("no adapter for broker %q", clip(st.Broker)))
	}
	since, err := ParseSince(st.Since)
	if err != nil {
		return Page{}, stages.DeadLetter(stages.ReasonSanityFail, RuleSince, err)
	}
	req := FetchRequest{UserID: st.UserID, Since: since, Cursor: st.Cursor, ImportID: st.ImportID, Options: st.Options}
	if NeedsConnection(st.Broker) {
		if req.AccessToken, err = im.connection(ctx, st); err != nil {
			return Page{}, err
		}
	}
	cctx, cancel := context.WithTimeout(ctx, im.cfg.FetchTimeout)
	defer cancel()
	page, err := adapter.FetchTrades(cctx, req)
	if err != nil {
		return Page{}, fmt.Errorf("fetch page %d of import %s from %s: %w", st.Page+1, st.ImportID, st.Broker, err)
	}
	return page, nil
}

// connection returns the opened access token of the run's active broker
// connection. A missing or inactive row, or a token that does not open, is
// a sanity_fail dead letter with rule trades.broker_connection; a missing
// BROKER_TOKEN_KEY is fatal (the command waits for the configuration). The
// token never appears in an error.
func (im *importer) connection(ctx context.Context, st ImportState) (string, error) {
	if im.cfg.TokenKey == nil {
		return "", stages.Fatal(fmt.Errorf("trades-import: a %s import needs BROKER_TOKEN_KEY to open broker tokens", st.Broker))
	}
	conn, ok, err := im.db.Connection(ctx, st.UserID, st.Broker)
	if err != nil {
		return "", stages.Retry(err)
	}
	if !ok {
		return "", stages.DeadLetter(stages.ReasonSanityFail, RuleBrokerConnection, fmt.Errorf("user %s has no active %s connection", st.UserID, st.Broker))
	}
	tok, err := im.cfg.TokenKey.Open(conn.AccessEnc, st.UserID, st.Broker, TokenAccess)
	if err != nil {
		return "", stages.DeadLetter(stages.ReasonSanityFail, RuleBrokerConnection, fmt.Errorf("user %s's %s connection: %w", st.UserID, st.Broker, err))
	}
	return string(tok), nil
}

// fetchFailed decides about a failed fetch (ClassifyFetchError): a 429 is
// a wait that spends no attempt, bounded by MaxPageWait per page; a 401 or
// 403 (or another dead letter) fails the run at once; other failures are
// retried by the runtime until the record's last attempt, which fails the
// run as retries_exhausted (trades.broker_fetch).
func (im *importer) fetchFailed(ctx context.Context, states importStates, m stages.Msg[Command], st ImportState, err error, now time.Time) ([]*kgo.Record, error) {
	if ctx.Err() != nil {
		return nil, fmt.Errorf("%w: %w", stages.ErrStopped, err)
	}
	var own *stages.Error
	if !errors.As(err, &own) { // the service's own verdicts (connection, token key) stand
		err = ClassifyFetchError(err, time.Duration(st.ResetMS)*time.Millisecond, im.cfg.RateLimitSafety)
	}
	c := stages.Classify(err)
	switch c.Kind {
	case stages.KindWait:
		im.m.vendor429.WithLabelValues("broker").Inc()
		im.m.pages.WithLabelValues(st.Broker, pageRateLimited).Inc()
		if st.WaitSince == nil {
			st.WaitSince = &now
			if perr := im.put(states, st); perr != nil {
				return nil, perr
			}
		} else if now.Sub(*st.WaitSince) >= im.cfg.MaxPageWait {
			st.ChainOffset = m.Source.Offset
			return im.fail(states, st, true, stages.ReasonRetriesExhausted, RuleBrokerFetch,
				fmt.Errorf("page %d waited %s or more on HTTP 429: %w", st.Page+1, im.cfg.MaxPageWait, err), now)
		}
		return nil, err
	case stages.KindDeadLetter:
		st.ChainOffset = m.Source.Offset
		return im.fail(states, st, true, c.Reason, c.Rule, err, now)
	case stages.KindFatal:
		return nil, err
	}
	if m.LastAttempt() {
		st.ChainOffset = m.Source.Offset
		return im.fail(states, st, true, stages.ReasonRetriesExhausted, RuleBrokerFetch,
			fmt.Errorf("after %d attempts: %w", m.Attempt, err), now)
	}
	im.m.pages.WithLabelValues(st.Broker, pageRetried).Inc()
	im.log.Warn("broker fetch failed, retrying", "import_id", st.ImportID, "page", st.Page+1, "attempt", m.Attempt, "max_attempts", m.MaxAttempts, "err", err)
	return nil, err
}

// failOrReturn fails the run st with the dead letter err, or returns err
// when it is not one (a retry or fatal error).
func (im *importer) failOrReturn(states importStates, st ImportState, err error, now time.Time) ([]*kgo.Record, error) {
	c := stages.Classify(err)
	if c.Kind != stages.KindDeadLetter {
		return nil, err
	}
	return im.fail(states, st, false, c.Reason, c.Rule, err, now)
}

// fail ends the run st as FAILED: the state, import.failed {import_id,
// run_id, reason, rule}, and the record dead-lettered with reason and rule.
// Pages stored earlier stay. onPage says whether a page failed (counted in
// sluice_trades_import_pages_total) rather than the start of the run.
func (im *importer) fail(states importStates, st ImportState, onPage bool, reason stages.Reason, rule string, err error, now time.Time) ([]*kgo.Record, error) {
	st.Status, st.Reason, st.Rule, st.Error = StatusFailed, string(reason), rule, err.Error()
	st.WaitSince, st.UpdatedAt = nil, now
	if perr := im.put(states, st); perr != nil {
		return nil, perr
	}
	im.m.imports.WithLabelValues("failed").Inc()
	if onPage {
		im.m.pages.WithLabelValues(st.Broker, pageFailed).Inc()
	}
	im.log.Warn("import failed", "import_id", st.ImportID, "run_id", st.RunID, "page", st.Page+1, "reason", reason, "rule", rule, "err", err)
	rec, rerr := im.failedEvent(st)
	if rerr != nil {
		return nil, rerr
	}
	return stages.DeadLetterWith([]*kgo.Record{rec}, reason, rule, err)
}

// rejected is a trade of a page that failed a rule.
type rejected struct {
	raw   RawTrade
	extID string
	err   error
}

// storePage validates a page's trades, upserts the good ones in one
// transaction and returns the page's outputs, in order: trade.upserted per
// stored trade, a one-trade push per rejected trade (on trades.import, in
// the user's partition), import.progress, then the next page or
// import.completed. The state (counts, page, cursor) is put with them: a
// redelivered page is fenced off by page = state.page + 1 and adds nothing.
func (im *importer) storePage(ctx context.Context, states importStates, st ImportState, pageNo int, page Page, offset int64, now time.Time) ([]*kgo.Record, error) {
	var good []Trade
	var bad []rejected
	for i, raw := range page.Trades {
		t, err := raw.Normalize(st.UserID, st.Broker, now)
		if err != nil {
			bad = append(bad, rejected{raw: raw, extID: rejectedExtID(raw, i), err: err})
			continue
		}
		good = append(good, t)
	}
	if err := im.db.UpsertTrades(ctx, st.ImportID, good); err != nil {
		return im.upsertFailed(ctx, states, st, offset, err, now)
	}

	p := states.Partition()
	var out []*kgo.Record
	for _, t := range good {
		rec, err := im.event(st.UserID, NewTradeUpserted(t, st.ImportID, now))
		if err != nil {
			return nil, err
		}
		out = append(out, rec)
	}
	for _, b := range bad {
		rec, err := im.rejectedPush(p, st, b)
		if err != nil {
			return nil, err
		}
		out = append(out, rec)
		im.log.Info("trade rejected: re-sent as a one-trade push to be dead-lettered", "import_id", st.ImportID, "ext_id", clip(b.extID), "rule", stages.Classify(b.err).Rule)
	}
	im.m.trades.WithLabelValues(st.Broker, "stored").Add(float64(len(good)))
	im.m.trades.WithLabelValues(st.Broker, "rejected").Add(float64(len(bad)))
	im.m.pages.WithLabelValues(st.Broker, pageStored).Inc()

	last := page.Next == ""
	st.Page, st.Cursor, st.ChainOffset = pageNo, page.Next, offset
	st.Fetched += len(page.Trades)
	st.Stored += len(good)
	st.Rejected += len(bad)
	st.WaitSince, st.NotBefore, st.UpdatedAt = nil, nil, now
	if page.RateLimit != nil {
		st.ResetMS = page.RateLimit.Reset.Milliseconds()
		if page.RateLimit.Remaining <= 0 && !last {
			nb := now.Add(page.RateLimit.Reset + im.cfg.RateLimitSafety)
			st.NotBefore = &nb
		}
	}
	percent := EstimatePercent(pageNo, last)
	if page.Percent != nil && !last {
		percent = min(max(*page.Percent, 0), 100)
	}
	prog, err := im.event(st.UserID, Event[ImportProgress]{
		EventID: ProgressEventID(st.RunID, pageNo), Type: TypeImportProgress, Timestamp: now,
		Payload: ImportProgress{ImportID: st.ImportID, RunID: st.RunID, Page: pageNo, Percent: percent, Fetched: st.Fetched, Stored: st.Stored, Rejected: st.Rejected},
	})
	if err != nil {
		return nil, err
	}
	out = append(out, prog)
	var next *kgo.Record
	if last {
		st.Status, st.CompletedAt = StatusCompleted, &now
		next, err = im.completedEvent(st)
		im.m.imports.WithLabelValues("completed").Inc()
	} else {
		next, err = im.pageRecord(p, st)
	}
	if err != nil {
		return nil, err
	}
	if err := im.put(states, st); err != nil {
		return nil, err
	}
	return append(out, next), nil
}

// upsertFailed decides about a failed transaction: a permanent error (the
// rows' values: classes 22 and 23 …) fails the run as sink_rejected with
// rule pg.<sqlstate>; a transient one (connection, deadlock, timeout …)
// waits DBRetryWait and runs the page again, spending no attempt; anything
// else (an undefined table: the migration has not run) is fatal.
func (im *importer) upsertFailed(ctx context.Context, states importStates, st ImportState, offset int64, err error, now time.Time) ([]*kgo.Record, error) {
	switch {
	case ctx.Err() != nil:
		return nil, fmt.Errorf("%w: %w", stages.ErrStopped, err)
	case pgsink.IsPermanent(err):
		st.ChainOffset = offset
		return im.fail(states, st, true, stages.ReasonSinkRejected, "pg."+pgsink.SQLState(err), err, now)
	case pgsink.IsTransient(err):
		im.log.Warn("trades upsert failed, waiting", "import_id", st.ImportID, "wait", im.cfg.DBRetryWait, "err", err)
		return nil, stages.Wait(im.cfg.DBRetryWait, err)
	}
	return nil, stages.Fatal(fmt.Errorf("trades-import: upsert trades: %w", err))
}

// rejectedExtID is the ext id a rejected trade's push_id names: its id
// when that is a usable string or integer, else "item-{index}" (its
// position in the page).
func rejectedExtID(raw RawTrade, i int) string {
	id, ok := jsonString(raw.ID)
	if !ok && integerText.Match(raw.ID) {
		id, ok = string(raw.ID), true
	}
	if !ok || id == "" || len(id) > MaxExtIDBytes {
		return "item-" + strconv.Itoa(i)
	}
	return id
}

// rejectedPush is the one-trade push a rejected trade is re-sent as, in
// the user's partition of trades.import: processing it fails the trade's
// rule again, and the runtime dead-letters it there, redrivable as a push
// (push_id dlq-{import_id}-{ext_id}).
func (im *importer) rejectedPush(p int32, st ImportState, b rejected) (*kgo.Record, error) {
	tr, err := json.Marshal([]RawTrade{b.raw})
	if err != nil {
		return nil, fmt.Errorf("encode rejected trade: %w", err)
	}
	v, err := json.Marshal(PushCommand{UserID: st.UserID, Broker: st.Broker, PushID: DeadLetterPushID(st.ImportID, b.extID), Trades: tr})
	if err != nil {
		return nil, fmt.Errorf("encode rejected trade's push: %w", err)
	}
	return &kgo.Record{Topic: im.cfg.ImportTopic, Partition: p, Key: []byte(st.UserID), Value: v,
		Headers: []kgo.RecordHeader{{Key: HeaderRejectedFrom, Value: []byte(st.ImportID)}}}, nil
}

// pageRecord is the next page of the RUNNING run st, in the user's
// partition.
func (im *importer) pageRecord(p int32, st ImportState) (*kgo.Record, error) {
	v, err := json.Marshal(PageCommand{UserID: st.UserID, ImportID: st.ImportID, RunID: st.RunID, Page: st.Page + 1, Cursor: st.Cursor, NotBefore: st.NotBefore})
	if err != nil {
		return nil, fmt.Errorf("encode page command: %w", err)
	}
	return &kgo.Record{Topic: im.cfg.ImportTopic, Partition: p, Key: []byte(st.UserID), Value: v}, nil
}

func (im *importer) completedEvent(st ImportState) (*kgo.Record, error) {
	at := st.UpdatedAt
	if st.CompletedAt != nil {
		at = *st.CompletedAt
	}
	return im.event(st.UserID, Event[ImportCompleted]{
		EventID: CompletedEventID(st.RunID), Type: TypeImportCompleted, Timestamp: at,
		Payload: ImportCompleted{ImportID: st.ImportID, RunID: st.RunID, UserID: st.UserID, Since: st.Since,
			Pages: st.Page, Fetched: st.Fetched, Stored: st.Stored, Rejected: st.Rejected},
	})
}

func (im *importer) failedEvent(st ImportState) (*kgo.Record, error) {
	return im.event(st.UserID, Event[ImportFailed]{
		EventID: FailedEventID(st.RunID), Type: TypeImportFailed, Timestamp: st.UpdatedAt,
		Payload: ImportFailed{ImportID: st.ImportID, RunID: st.RunID, Reason: st.Reason, Rule: st.Rule},
	})
}

// event is a trades.events record of the user.
func (im *importer) event(userID string, e any) (*kgo.Record, error) {
	v, err := json.Marshal(e)
	if err != nil {
		return nil, fmt.Errorf("encode event: %w", err)
	}
	return &kgo.Record{Topic: im.cfg.EventsTopic, Key: []byte(userID), Value: v}, nil
}

func (im *importer) put(states importStates, st ImportState) error {
	if err := states.Put(st.ImportID, st); err != nil {
		return fmt.Errorf("import state %s: %w", st.ImportID, err)
	}
	return nil
}
