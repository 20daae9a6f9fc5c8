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
	"github.com/sluicehq/sluice/stages/run"
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

// analysed is the outcome of one item: its row, its analysis.finished
// record and, for a failed item, its DLQ record.
type analysed struct {
	row      row
	finished *kgo.Record
	dlq      *kgo.Record
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
// stops the runner instead of dead-lettering the item.
type failure struct {
	reason stages.Reason
	rule   string
	err    error
	fatal  error // stages.Fatal; reason and rule are then unused
}

func (a *analytics) stage(ctx context.Context, m stages.Msg[collectedMsg]) ([]analysed, error) {
	t0 := time.Now()
	p := m.Value.Event.Payload
	res, raw, attempts, f := a.analyse(ctx, p)
	if f != nil && ctx.Err() != nil {
		return nil, ctx.Err() // stopping: leave the record for redelivery
	}
	if f != nil && f.fatal != nil {
		return nil, f.fatal // nothing is written or committed for this record
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
		out.dlq = a.dlqRecord(m, f, attempts, now)
	}
	b, err := json.Marshal(Event[AnalysisFinished]{EventID: finishedEventID(p.ItemID), Timestamp: now, Payload: fin})
	if err != nil {
		return nil, stages.DeadLetter(stages.ReasonException, "", fmt.Errorf("encode analysis.finished: %w", err))
	}
	out.finished = &kgo.Record{Topic: a.cfg.AnalysisFinishedTopic, Key: []byte(p.ItemID), Value: b}
	return []analysed{out}, nil
}

// analyse loads the raw object and runs every analyser. It returns the
// result, the raw item, the number of object reads and a failure.
func (a *analytics) analyse(ctx context.Context, p DataCollected) (res Result, raw RawItem, attempts int, f *failure) {
	var data []byte
	wait := a.cfg.ObjectBackoff
	for attempts = 1; ; attempts++ {
		var err error
		data, err = a.objects.Get(ctx, p.ObjectKey)
		if err == nil {
			break
		}
		switch {
		case errors.Is(err, objstore.ErrNotFound):
			return res, raw, attempts, &failure{reason: stages.ReasonSanityFail, rule: RuleObjectMissing, err: fmt.Errorf("raw object %s: %w", p.ObjectKey, err)}
		case errors.Is(err, objstore.ErrInvalidKey):
			// The record names a key no store can hold: no retry helps.
			return res, raw, attempts, &failure{reason: stages.ReasonSanityFail, rule: RuleObjectKey, err: fmt.Errorf("raw object key %.200q: %w", p.ObjectKey, err)}
		}
		if fatal := storeConfigError("raw object "+clipKey(p.ObjectKey), err); fatal != nil {
			return res, raw, attempts, &failure{fatal: fatal}
		}
		if ctx.Err() != nil || attempts >= a.cfg.ObjectAttempts {
			return res, raw, attempts, &failure{reason: stages.ReasonRetriesExhausted, rule: RuleObjectRead, err: fmt.Errorf("raw object %s after %d reads: %w", p.ObjectKey, attempts, err)}
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
		case <-t.C:
		}
		wait *= 2
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return res, raw, attempts, &failure{reason: stages.ReasonDecodeError, rule: RuleRawJSON, err: fmt.Errorf("raw object %s: %w", p.ObjectKey, err)}
	}
	in := Input{Item: raw, Keywords: p.Keywords, Tokens: tokenize(raw.Text)}
	for _, an := range a.cfg.Analyzers {
		if err := runAnalyzer(an, &in, &res); err != nil {
			return res, raw, attempts, &failure{reason: stages.ReasonException, rule: RuleAnalyzer + an.Name(), err: err}
		}
	}
	return res, raw, attempts, nil
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

// dlqRecord builds the smap.analytics.errors record of a failed item: the
// original key and value and the DLQ headers (docs/dead-letters.md).
func (a *analytics) dlqRecord(m stages.Msg[collectedMsg], f *failure, attempts int, now time.Time) *kgo.Record {
	hs := run.DLQHeaders(m.Headers, run.DLQMeta{
		Reason: f.reason, Rule: f.rule, Error: f.err.Error(), Stage: AnalyticsStageName,
		Source: m.Source, Attempts: attempts, FailedAt: now,
	})
	return &kgo.Record{Topic: a.cfg.AnalyticsErrorsTopic, Key: []byte(m.Key), Value: m.Value.Raw, Headers: hs}
}

// analyticsSink makes a batch durable in the order the progress counter
// relies on: post_analytics rows first (so that a rebuild from Postgres
// sees every counted item), then the DLQ and analysis.finished records,
// acknowledged before the runtime commits the input offsets.
type analyticsSink struct {
	db   *pgxpool.Pool
	prod *kgo.Client
	m    *metrics
}

func (s *analyticsSink) Write(ctx context.Context, batch []analysed) error {
	rows := make([]row, len(batch))
	recs := make([]*kgo.Record, 0, 2*len(batch))
	for i, it := range batch {
		rows[i] = it.row
		if it.dlq != nil {
			recs = append(recs, it.dlq)
		}
		recs = append(recs, it.finished)
	}
	if err := upsertRows(ctx, s.db, rows); err != nil {
		return err
	}
	if err := s.prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		return fmt.Errorf("produce %d analytics records: %w", len(recs), err)
	}
	for _, it := range batch {
		s.m.analysed.WithLabelValues(it.result).Inc()
	}
	return nil
}
