package modules

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/stages"
	"github.com/sluicehq/sluice/stages/run"
)

// RefreshStageName is the refresh stage (dlq.stage of its dead letters).
const RefreshStageName = "modules/refresh"

// fetchReq is one upstream call, the input of the rate-limited fetch.
type fetchReq struct{ ticker, module string }

// refresher is the modules-refresh stage. It owns the states of its
// assigned partitions of modules.refresh and is their only writer: they
// live in the runtime's state store (changelog modules.state, restored
// keeping per key the greatest token). The runtime calls it for the
// partitions concurrently, and within a partition for different keys
// concurrently (RefreshKeyConcurrency), each key's requests in offset
// order: a request sees the state the previous request of its key wrote,
// in the same batch too, which is why N queued requests of a key cost one
// upstream call. Its methods are safe for concurrent use.
type refresher struct {
	cfg    Config
	db     DB
	states *run.Store[State]
	m      *metrics
	log    *slog.Logger
	fetchF stages.Func[fetchReq, Snapshot]

	catMu  sync.Mutex
	cat    Catalog
	catAt  time.Time
	catErr error
}

// newStateStore declares the state store over topic, counting the records
// its restore refuses for a smaller token in sluice_modules_fenced_total
// {where="restore"}.
func newStateStore(topic string, m *metrics) (*run.Store[State], error) {
	sc := StateStoreConfig(topic)
	fold := sc.Fold
	sc.Fold = func(cur, next run.Entry[State]) bool {
		keep := fold(cur, next)
		if !keep {
			m.fenced.WithLabelValues("restore").Inc()
		}
		return keep
	}
	s, err := run.NewStore(sc)
	if err != nil {
		return nil, fmt.Errorf("modules: state store: %w", err)
	}
	return s, nil
}

// catalog returns the module catalog, read again once it is older than
// CatalogRefresh. A failed read keeps the previous catalog (and is tried
// again after another CatalogRefresh); without one, the request waits.
func (r *refresher) catalog(ctx context.Context) (Catalog, error) {
	r.catMu.Lock()
	defer r.catMu.Unlock()
	now := time.Now()
	if r.cat != nil && now.Sub(r.catAt) < r.cfg.CatalogRefresh {
		return r.cat, nil
	}
	cat, err := r.cfg.Catalog(ctx)
	if err != nil {
		if r.cat != nil {
			r.log.Warn("catalog re-read failed, the previous one stays", "err", err)
			r.catAt = now
			return r.cat, nil
		}
		return nil, stages.Wait(PostgresRetryWait, fmt.Errorf("modules: catalog: %w", err))
	}
	r.cat, r.catAt = cat, now
	return cat, nil
}

// moduleLabel is the module label of a request's metrics: the module when
// the catalog knows it, else "unknown" (the label set stays bounded).
func moduleLabel(rec RefreshRecord, cat Catalog) string {
	if m, ok := jsonString(rec.Module); ok {
		if _, known := cat[m]; known {
			return m
		}
	}
	return "unknown"
}

// stage handles one modules.refresh record: the rules, the re-keying of a
// key differing only in case, the gate on the key's state, then a fetch or
// an analysis.
func (r *refresher) stage(ctx context.Context, m stages.Msg[RefreshRecord]) ([]*kgo.Record, error) {
	cat, err := r.catalog(ctx)
	if err != nil {
		return nil, err
	}
	v, err := m.Value.Validate(m.Key, cat)
	if err != nil {
		r.m.requests.WithLabelValues(moduleLabel(m.Value, cat), outcomeError).Inc()
		return nil, err
	}
	req := v.Request
	if v.Rekey {
		val, err := json.Marshal(req)
		if err != nil {
			return nil, fmt.Errorf("modules: encode re-keyed request: %w", err)
		}
		r.m.requests.WithLabelValues(req.Module, outcomeRekeyed).Inc()
		return []*kgo.Record{{Topic: r.cfg.RefreshTopic, Key: []byte(req.Key()), Value: val}}, nil
	}
	states, err := r.states.Of(ctx)
	if err != nil {
		return nil, err
	}
	var cur *State
	if s, ok := states.Get(req.Key()); ok {
		cur = &s
	}
	switch d := Gate(cur, req.Force, v.Module, r.cfg.Now(), r.cfg.ErrorCooldown); d {
	case DecisionSkipFresh, DecisionSkipCooldown:
		r.m.requests.WithLabelValues(req.Module, string(d)).Inc()
		return nil, nil
	case DecisionAnalysisOnly:
		return nil, r.analysisOnly(ctx, states, m, *cur, v)
	}
	return nil, r.fetch(ctx, states, m, cur, v)
}

// owns is the ownership check before a state write: the partition is not
// stopping (revoked, or the runner shutting down) and the call's context
// is live. Otherwise the record is given up for the next owner.
func (r *refresher) owns(ctx context.Context) error {
	select {
	case <-stages.Stopping(ctx):
		return fmt.Errorf("modules refresh: %w", stages.ErrStopped)
	default:
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("modules refresh: %w: %w", stages.ErrStopped, err)
	}
	return nil
}

// fetch takes the key's lease (the refreshing state, durable before the
// upstream call), calls the upstream and completes the refresh.
func (r *refresher) fetch(ctx context.Context, states *run.Partition[State], m stages.Msg[RefreshRecord], cur *State, v Validated) error {
	req := v.Request
	key := req.Key()
	an, ok := r.cfg.Analyzers[req.Module]
	if !ok {
		r.m.requests.WithLabelValues(req.Module, outcomeError).Inc()
		return AnalyzerFailed(req.Module, errors.New("no analyzer for the module"))
	}
	base := State{Ticker: req.Ticker, Module: req.Module, Status: StatusMissing}
	if cur != nil {
		base = *cur
	}
	if err := r.owns(ctx); err != nil {
		return err
	}
	if own, ok := run.Owner(ctx); ok && cur != nil && cur.Status == StatusRefreshing && cur.Epoch < own.Epoch {
		r.m.takeovers.Inc()
		owner := ""
		if cur.Lease != nil {
			owner = cur.Lease.Owner
		}
		r.log.Info("refresh left unfinished by a previous owner taken over", "key", key, "previous_owner", owner,
			"previous_epoch", cur.Epoch, "epoch", own.Epoch)
	}
	leased := base.Refreshing(r.cfg.MemberID, states.NextToken(), r.cfg.Now())
	if err := states.PutNow(key, leased); err != nil {
		return stateErr("lease", key, err)
	}
	var pending *pendingWrite
	if errors.As(m.PrevErr, &pending) && pending.key == key {
		// The previous attempt fetched this but could not write it.
		return r.complete(ctx, states, m, v, an, pending.snap, pending.hash, true)
	}
	outs, err := r.fetchF(ctx, stages.Msg[fetchReq]{Key: key, Value: fetchReq{ticker: req.Ticker, module: req.Module}})
	if err != nil {
		return r.fail(ctx, states, m, key, err)
	}
	snap := outs[0]
	hash, err := InputHash(req.Module, an.Version(), snap.Payload)
	if err != nil {
		return r.fail(ctx, states, m, key, err)
	}
	return r.complete(ctx, states, m, v, an, snap, hash, true)
}

// analysisOnly analyses the key's current data again (its analysis is
// missing, failed or expired). Without the stored snapshot it fetches.
func (r *refresher) analysisOnly(ctx context.Context, states *run.Partition[State], m stages.Msg[RefreshRecord], cur State, v Validated) error {
	an, ok := r.cfg.Analyzers[v.Request.Module]
	if !ok {
		r.m.requests.WithLabelValues(v.Request.Module, outcomeError).Inc()
		return AnalyzerFailed(v.Request.Module, errors.New("no analyzer for the module"))
	}
	payload, found, err := storedSnapshot(ctx, r.db, cur.Ticker, cur.Module, cur.InputHash)
	if err != nil {
		return err
	}
	if !found {
		return r.fetch(ctx, states, m, &cur, v)
	}
	return r.complete(ctx, states, m, v, an, Snapshot{Payload: payload, DataDate: cur.DataDate}, cur.InputHash, false)
}

// complete analyses snap (reusing a current stored analysis of its input
// hash), writes the snapshot (when fetched) and the analysis in one
// PostgreSQL transaction, then the state: ready with the new data, or
// with the new analysis only. A failed analysis leaves the data ready with
// analysis.error set and dead-letters the request
// (modules.analyzer.<module>).
func (r *refresher) complete(ctx context.Context, states *run.Partition[State], m stages.Msg[RefreshRecord], v Validated,
	an Analyzer, snap Snapshot, hash string, fetched bool) error {
	req, mod := v.Request, v.Module
	key := req.Key()
	now := r.cfg.Now().UTC()
	// The cache read and the writes are one transaction: one commit per
	// refresh. The analyzers are local computations (no network call), so
	// the transaction stays short.
	tx, err := r.db.Begin(ctx)
	if err != nil {
		return r.failPG(ctx, states, m, key, pgErr("begin", err), fetched, snap, hash)
	}
	a, anErr, version, err := r.analyseAndWrite(ctx, tx, v, an, snap, hash, fetched, now)
	if err == nil {
		err = tx.Commit(ctx)
		if err != nil {
			err = pgErr("commit", err)
		}
	}
	if err != nil {
		_ = tx.Rollback(context.WithoutCancel(ctx))
		return r.failPG(ctx, states, m, key, err, fetched, snap, hash)
	}
	if version > 0 {
		a.AnalysisVersion = version
	}
	if err := r.owns(ctx); err != nil {
		return err
	}
	cur, _ := states.Get(key)
	var next State
	if fetched {
		next = cur.Ready(mod, hash, snap.DataDate, a, states.NextToken(), now)
	} else {
		next = cur.next(states.NextToken(), now)
		next.Analysis = a
	}
	// A completed refresh is made durable at once rather than with the
	// batch: the state stands for the PostgreSQL rows just committed, not
	// for outputs of the batch, so the mirror (and every reader of the
	// view) sees the key ready without waiting for the batch's other keys.
	// A failed analysis goes with the batch, with its dead letter.
	put := states.PutNow
	if anErr != nil {
		put = states.Put
	}
	if err := put(key, next); err != nil {
		return stateErr("state", key, err)
	}
	outcome := DecisionFetch
	if !fetched {
		outcome = DecisionAnalysisOnly
	}
	r.m.requests.WithLabelValues(req.Module, string(outcome)).Inc()
	if anErr != nil {
		return AnalyzerFailed(req.Module, anErr)
	}
	return nil
}

// analyseAndWrite, in tx, reuses a current stored analysis of hash or runs
// an, and writes the snapshot (when fetched) and a computed analysis. It
// returns the analysis, the analyzer's error (the data is written all the
// same), the written analysis's version (0: none written) and a
// PostgreSQL error.
func (r *refresher) analyseAndWrite(ctx context.Context, tx pgx.Tx, v Validated, an Analyzer, snap Snapshot, hash string,
	fetched bool, now time.Time) (a *Analysis, anErr error, version int, err error) {
	req, mod := v.Request, v.Module
	if a, err = cachedAnalysis(ctx, tx, req.Ticker, req.Module, hash, now); err != nil {
		return nil, nil, 0, err
	}
	w := sinkWrite{ticker: req.Ticker, module: req.Module, inputHash: hash, dataDate: snap.DataDate, fetchedAt: now}
	if fetched {
		w.payload = snap.Payload
	}
	if a != nil {
		r.m.analyses.WithLabelValues(req.Module, "cache_hit").Inc()
	} else {
		res, err := an.Analyze(ctx, req.Ticker, snap.Payload)
		if err != nil {
			r.m.analyses.WithLabelValues(req.Module, "error").Inc()
			anErr = err
			a = &Analysis{InputHash: hash, AnalyzedAt: utc(now), Error: clipTo(err.Error(), maxErrorBytes)}
		} else {
			r.m.analyses.WithLabelValues(req.Module, "computed").Inc()
			w.result, w.analyzedAt, w.analysisExpires = res, now, now.Add(mod.AnalysisTTL)
			a = &Analysis{InputHash: hash, AnalyzedAt: utc(now), ExpiresAt: utc(now.Add(mod.AnalysisTTL))}
		}
	}
	if w.payload == nil && w.result == nil {
		return a, anErr, 0, nil
	}
	if version, err = w.write(ctx, tx); err != nil {
		return nil, nil, 0, err
	}
	if w.result == nil {
		version = 0
	}
	return a, anErr, version, nil
}

// failPG handles a PostgreSQL failure (see pgErr): a wait keeps a fetched
// snapshot for the next attempt (pendingWrite); a refusal of a fetched
// refresh fails like an upstream failure (state error), one of an
// analysis only leaves the state alone.
func (r *refresher) failPG(ctx context.Context, states *run.Partition[State], m stages.Msg[RefreshRecord], key string, err error,
	fetched bool, snap Snapshot, hash string) error {
	if serr := r.owns(ctx); serr != nil {
		return serr
	}
	c := stages.Classify(err)
	switch {
	case c.Kind == stages.KindWait && fetched:
		return stages.Wait(c.After, &pendingWrite{key: key, hash: hash, snap: snap, err: c.Err})
	case fetched:
		return r.fail(ctx, states, m, key, err)
	case c.Kind == stages.KindDeadLetter:
		r.m.requests.WithLabelValues(m.Value.moduleName(), outcomeError).Inc()
	}
	return err
}

// fail decides about a failed refresh of key (err classified): a wait
// (429, a limiter denial) or a fatal error (401, 403) is returned as it is,
// the lease staying; a retry before the last attempt too (the next attempt
// renews the lease). A dead letter, or a retry at the last attempt
// (retries_exhausted with the error's rule), turns the state error,
// keeping the last good data, and dead-letters the request.
func (r *refresher) fail(ctx context.Context, states *run.Partition[State], m stages.Msg[RefreshRecord], key string, err error) error {
	if serr := r.owns(ctx); serr != nil {
		return serr
	}
	c := stages.Classify(err)
	var dl error
	switch {
	case c.Kind == stages.KindWait || c.Kind == stages.KindFatal:
		return err
	case c.Kind == stages.KindRetry && !m.LastAttempt():
		r.log.Warn("refresh failed, retrying", "key", key, "attempt", m.Attempt, "max_attempts", m.MaxAttempts, "err", err)
		return err
	case c.Kind == stages.KindRetry:
		dl = stages.DeadLetter(stages.ReasonRetriesExhausted, c.Rule, err)
	default:
		dl = err
	}
	cause := err // the state records what failed, not how it is handled
	if c.Err != nil {
		cause = c.Err
	}
	cur, _ := states.Get(key)
	if perr := states.Put(key, cur.Failed(cause, states.NextToken(), r.cfg.Now())); perr != nil {
		return stateErr("state", key, perr)
	}
	r.m.requests.WithLabelValues(m.Value.moduleName(), outcomeError).Inc()
	r.log.Warn("refresh failed", "key", key, "attempts", m.Attempt, "err", err)
	return dl
}

// stateErr wraps a failed state write; one refused because the partition
// was revoked or stopped gives the record up for the next owner
// (stages.ErrStopped).
func stateErr(what, key string, err error) error {
	if errors.Is(err, run.ErrPartitionClosed) {
		return fmt.Errorf("modules: %s %s: %w: %w", what, key, stages.ErrStopped, err)
	}
	return fmt.Errorf("modules: %s %s: %w", what, key, err)
}

// fetchUpstream is the inner stage of the limiter: one upstream call with
// the timeout, measured and classified (ClassifyUpstreamError).
func (r *refresher) fetchUpstream(ctx context.Context, m stages.Msg[fetchReq]) ([]Snapshot, error) {
	q := m.Value
	cctx, cancel := context.WithTimeout(ctx, r.cfg.UpstreamTimeout)
	defer cancel()
	t0 := time.Now()
	snap, err := r.cfg.Source.Fetch(cctx, q.ticker, q.module)
	r.m.duration.WithLabelValues(q.module).Observe(time.Since(t0).Seconds())
	r.m.upstream.WithLabelValues(q.module, UpstreamResult(err)).Inc()
	if err != nil {
		return nil, ClassifyUpstreamError(fmt.Errorf("fetch %s: %w", Key(q.ticker, q.module), err))
	}
	return []Snapshot{snap}, nil
}

// moduleName is the record's module for metrics once the rules passed.
func (r RefreshRecord) moduleName() string {
	s, _ := jsonString(r.Module)
	return s
}
