package smap

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/sinks/objstore"
	"github.com/sluicehq/sluice/stages"
)

// Rule ids (the dlq.rule header) of analytics failures.
const (
	RuleObjectMissing = "smap.raw_object_missing" // reason sanity_fail
	RuleObjectKey     = "smap.object_key"         // reason sanity_fail: a key no store can hold (analytics and collector)
	RuleObjectRead    = "smap.raw_object_read"    // reason retries_exhausted
	RuleRawJSON       = "smap.raw_json"           // reason decode_error
	RuleAnalyzer      = "smap.analyzer."          // + analyser name; reason exception
)

// AnalyticsStageName is the dlq.stage header of analytics failures.
const AnalyticsStageName = "smap-analytics"

// collectedMsg is a decoded data.collected record with its original bytes,
// which a failure copies to the DLQ unchanged.
type collectedMsg struct {
	Event Event[DataCollected]
	Raw   []byte
}

func decodeCollected(_, value []byte) (collectedMsg, error) {
	e, err := DecodeDataCollected(value)
	if err != nil {
		return collectedMsg{}, stages.DeadLetter(stages.ReasonDecodeError, "", err)
	}
	return collectedMsg{Event: e, Raw: value}, nil
}

// analysed is the outcome of one item: its row and its analysis.finished
// record. A failed item has both too; its data.collected record is
// dead-lettered by the runtime (stages.DeadLetterWith).
type analysed struct {
	row      row
	finished *kgo.Record
	result   string // "ok" or the DLQ reason, for metrics
}

// analytics loads raw items, runs the analysers and hands the results to
// analyticsSink. Every outcome, failures included, yields an
// analysis.finished record, so the progress counter counts every item.
type analytics struct {
	cfg     Config
	objects objstore.Store
	m       *metrics
	log     *slog.Logger
}

// failure is a classified failure of one item. A fatal failure (a
// permanent object-store configuration error) is not the item's fault: it
// stops the runner instead of dead-lettering the item. A retry failure (a
// transient read error of the raw object before the record's last
// attempt) is retried by the runtime.
type failure struct {
	reason stages.Reason
	rule   string
	err    error
	fatal  error // stages.Fatal; reason and rule are then unused
	retry  error // stages.Retry; reason and rule are then unused
}

// stage analyses one item. A failed item is dead-lettered by the runtime
// to smap.analytics.errors (the data.collected record, with the DLQ
// headers; dlq.stage smap-analytics) and still yields its row and its
// analysis.finished record, so that it counts as done (with an error).
func (a *analytics) stage(ctx context.Context, m stages.Msg[collectedMsg]) ([]analysed, error) {
	t0 := time.Now()
	p := m.Value.Event.Payload
	res, raw, f := a.analyse(ctx, m)
	if f != nil && ctx.Err() != nil {
		return nil, ctx.Err() // stopping: leave the record for redelivery
	}
	if f != nil && f.fatal != nil {
		return nil, f.fatal // nothing is written or committed for this record
	}
	if f != nil && f.retry != nil {
		return nil, f.retry
	}
	a.m.analyseDur.Observe(time.Since(t0).Seconds())
	now := a.cfg.Now().UTC()
	platform := p.Platform
	if platform == "" {
		platform = raw.Platform
	}
	out := analysed{result: "ok", row: row{
		ProjectID: p.ProjectID, ItemID: p.ItemID, Platform: platform, ObjectKey: p.ObjectKey, AnalyzedAt: now,
	}}
	fin := AnalysisFinished{ProjectID: p.ProjectID, ItemID: p.ItemID, Platform: platform, AnalyzedAt: now}
	if f == nil {
		out.row.Language, out.row.SentimentLabel, out.row.SentimentScore = res.Language, res.SentimentLabel, res.SentimentScore
		out.row.Keywords, out.row.Mentions, out.row.EngagementScore = res.Keywords, res.Mentions, res.EngagementScore
		fin.Status, fin.Language, fin.SentimentLabel = AnalysisOK, res.Language, res.SentimentLabel
		fin.SentimentScore, fin.EngagementScore = res.SentimentScore, res.EngagementScore
	} else {
		out.result = string(f.reason)
		out.row.ErrorType, out.row.ErrorMsg = string(f.reason), f.err.Error()
		fin.Status, fin.ErrorReason, fin.Error = AnalysisError, string(f.reason), f.err.Error()
	}
	b, err := json.Marshal(Event[AnalysisFinished]{EventID: finishedEventID(p.ItemID), Timestamp: now, Payload: fin})
	if err != nil {
		return nil, stages.DeadLetter(stages.ReasonException, "", fmt.Errorf("encode analysis.finished: %w", err))
	}
	out.finished = &kgo.Record{Topic: a.cfg.AnalysisFinishedTopic, Key: []byte(p.ItemID), Value: b}
	if f != nil {
		return stages.DeadLetterWith([]analysed{out}, f.reason, f.rule, f.err)
	}
	return []analysed{out}, nil
}

// analyse loads the raw object and runs every analyser. It returns the
// result, the raw item and a failure. A read of the raw object that fails
// transiently is a retry failure (the runtime reads it again at the next
// attempt, Config.Runtime.Retry) unless m is the record's last attempt:
// then the item fails as retries_exhausted.
func (a *analytics) analyse(ctx context.Context, m stages.Msg[collectedMsg]) (res Result, raw RawItem, f *failure) {
	p := m.Value.Event.Payload
	data, err := a.objects.Get(ctx, p.ObjectKey)
	switch {
	case err == nil:
	case errors.Is(err, objstore.ErrNotFound):
		return res, raw, &failure{reason: stages.ReasonSanityFail, rule: RuleObjectMissing, err: fmt.Errorf("raw object %s: %w", p.ObjectKey, err)}
	case errors.Is(err, objstore.ErrInvalidKey):
		// The record names a key no store can hold: no retry helps.
		return res, raw, &failure{reason: stages.ReasonSanityFail, rule: RuleObjectKey, err: fmt.Errorf("raw object key %.200q: %w", p.ObjectKey, err)}
	default:
		if fatal := storeConfigError("raw object "+clipKey(p.ObjectKey), err); fatal != nil {
			return res, raw, &failure{fatal: fatal}
		}
		if !m.LastAttempt() {
			return res, raw, &failure{retry: stages.Retry(fmt.Errorf("raw object %s (attempt %d): %w", p.ObjectKey, m.Attempt, err))}
		}
		return res, raw, &failure{reason: stages.ReasonRetriesExhausted, rule: RuleObjectRead, err: fmt.Errorf("raw object %s after %d attempts: %w", p.ObjectKey, m.Attempt, err)}
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return res, raw, &failure{reason: stages.ReasonDecodeError, rule: RuleRawJSON, err: fmt.Errorf("raw object %s: %w", p.ObjectKey, err)}
	}
	in := Input{Item: raw, Keywords: p.Keywords, Tokens: tokenize(raw.Text)}
	for _, an := range a.cfg.Analyzers {
		if err := runAnalyzer(an, &in, &res); err != nil {
			return res, raw, &failure{reason: stages.ReasonException, rule: RuleAnalyzer + an.Name(), err: err}
		}
	}
	return res, raw, nil
}

// runAnalyzer runs one analyser, turning a panic into an error.
func runAnalyzer(an Analyzer, in *Input, res *Result) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("analyser %s panicked: %v", an.Name(), p)
		}
	}()
	if err := an.Analyze(in, res); err != nil {
		return fmt.Errorf("analyser %s: %w", an.Name(), err)
	}
	// A NaN or infinite score cannot be encoded in analysis.finished: the
	// item would never be counted and its project never complete.
	for name, v := range map[string]float64{"sentiment": res.SentimentScore, "engagement": res.EngagementScore} {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return fmt.Errorf("analyser %s: %s score %v is not a finite number", an.Name(), name, v)
		}
	}
	return nil
}

// analyticsSink writes a batch's post_analytics rows (an idempotent upsert)
// and announces each item with its analysis.finished record, which the
// runtime produces (run.Publisher) after the rows are written, in the
// Kafka transaction that commits the batch's input offsets and dead
// letters: a read_committed reader (the progress counter) sees one
// analysis.finished per data.collected record, visible with the next
// commit (within Config.Runtime.CommitInterval, default 1s, of the rows),
// and every item it sees has its row (a rebuild from Postgres sees every
// counted item).
// A batch whose transaction aborts (a member killed or fenced mid-commit)
// is written again by the next owner, its records published again in that
// owner's transaction.
type analyticsSink struct {
	db *pgxpool.Pool
	m  *metrics
}

func (s *analyticsSink) Write(ctx context.Context, batch []analysed) error {
	rows := make([]row, len(batch))
	for i, it := range batch {
		rows[i] = it.row
	}
	if err := upsertRows(ctx, s.db, rows); err != nil {
		return err
	}
	for _, it := range batch {
		s.m.analysed.WithLabelValues(it.result).Inc()
	}
	return nil
}

// Records returns the analysis.finished records of the items written
// (run.Publisher), in batch order.
func (s *analyticsSink) Records(written []analysed) []*kgo.Record {
	recs := make([]*kgo.Record, len(written))
	for i, it := range written {
		recs[i] = it.finished
	}
	return recs
}
