package trades

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/shopspring/decimal"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/errgroup"

	"github.com/sluicehq/sluice/stages"
)

// scoreIn is a decoded trades.events record: a scoring request (from
// import.completed or score.request), or skip for every other type.
type scoreIn struct {
	skip   bool
	userID string
	since  string
}

// decodeScoreIn decodes trades.events for trades-score: import.completed
// and score.request are requests; every other known type is skipped (the
// stage drops it). Malformed envelopes are decode_error or
// unknown_task_type (DecodeEvent).
func decodeScoreIn(_, value []byte) (scoreIn, error) {
	e, err := DecodeEvent(value)
	if err != nil {
		return scoreIn{}, err
	}
	switch e.Type {
	case TypeImportCompleted:
		p, err := DecodePayload[ImportCompleted](e)
		return scoreIn{userID: p.UserID, since: p.Since}, err
	case TypeScoreRequest:
		p, err := DecodePayload[ScoreRequest](e)
		return scoreIn{userID: p.UserID, since: p.Since}, err
	}
	return scoreIn{skip: true}, nil
}

// tagRow is a bias_tags row as the scorer reads it.
type tagRow struct {
	label       string
	reflectID   string
	reflectedAt *time.Time
}

// reflectOut is one coach.reflect to publish: its event id and payload.
type reflectOut struct {
	eventID string
	payload CoachReflect
}

// scoreOut is the outcome of one request: the user's scored trades and
// the coach.reflect events prepared for the trades whose reflection will
// be pending after the sink's transaction.
type scoreOut struct {
	userID   string
	scored   []Scored
	reflects map[string]reflectOut // by trade id
	started  time.Time
}

// scorer is trades-score's stage. It is safe for concurrent use.
type scorer struct {
	cfg   ScoreConfig
	db    *pgxpool.Pool
	coach *Coach // nil: template insights
	m     *scoreMetrics
}

// stage scores one request: it loads the user's whole history, labels
// the trades with ts >= since and prepares the coach.reflect of every
// trade whose reflection will be pending (a changed non-empty label set,
// or one still unpublished). Coach and market-data failures are retry
// errors (rules trades.ai, trades.marketdata); a database read failure is
// a wait (the partition pauses; nothing is dead-lettered for it).
func (s *scorer) stage(ctx context.Context, m stages.Msg[scoreIn]) ([]scoreOut, error) {
	in := m.Value
	if in.skip {
		return nil, nil
	}
	started := time.Now()
	if err := CheckUserID(in.userID); err != nil {
		return nil, err
	}
	if err := CheckKey(m.Key, in.userID); err != nil {
		return nil, err
	}
	since, err := CheckSince(in.since, s.cfg.Now())
	if err != nil {
		return nil, err
	}
	history, err := LoadHistory(ctx, s.db, in.userID)
	if err != nil {
		return nil, stages.Wait(5*time.Second, err)
	}
	scored := Score(history, since)
	ids := make([]string, len(scored))
	for i, sc := range scored {
		ids[i] = sc.Trade.ID
	}
	tags, err := loadTags(ctx, s.db, ids)
	if err != nil {
		return nil, stages.Wait(5*time.Second, err)
	}
	out := scoreOut{userID: in.userID, scored: scored, reflects: map[string]reflectOut{}, started: started}
	var pending []Scored
	for _, sc := range scored {
		if reflectPending(sc, tags[sc.Trade.ID]) {
			pending = append(pending, sc)
		}
	}
	reflects := make([]reflectOut, len(pending))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(s.cfg.AIConcurrency)
	for i, sc := range pending {
		g.Go(func() error {
			r, err := s.reflect(gctx, sc)
			reflects[i] = r
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	for i, sc := range pending {
		out.reflects[sc.Trade.ID] = reflects[i]
	}
	return []scoreOut{out}, nil
}

// reflectPending says whether sc's reflection will be pending once its
// labels are written over its current rows: its non-empty label set
// differs from the stored one (a new reflect_event_id), or it is the
// stored one and its coach.reflect was never marked published.
func reflectPending(sc Scored, rows []tagRow) bool {
	names := sc.LabelNames()
	if len(names) == 0 {
		return false
	}
	id := ReflectEventID(sc.Trade.ID, names)
	stored := make([]string, 0, len(rows))
	for _, r := range rows {
		stored = append(stored, r.label)
	}
	slices.Sort(stored)
	if !slices.Equal(stored, names) {
		return true
	}
	for _, r := range rows {
		if r.reflectedAt == nil || r.reflectID != id {
			return true
		}
	}
	return false
}

// reflect builds sc's coach.reflect: the sparkline of the symbol's hourly
// closes before the trade (market_bars), and the insight of the AI coach
// (its indicators added to the label features) or of a template.
func (s *scorer) reflect(ctx context.Context, sc Scored) (reflectOut, error) {
	series, err := loadSeries(ctx, s.db, sc.Trade.Symbol, sc.Trade.TS)
	if err != nil {
		return reflectOut{}, &stages.Error{Kind: stages.KindRetry, Rule: RuleMarketData,
			Err: fmt.Errorf("market data of %s before %s: %w", sc.Trade.Symbol, sc.Trade.TS.Format(time.RFC3339), err)}
	}
	labels := make([]LabelConfidence, len(sc.Labels))
	features := map[string]any{}
	for i, l := range sc.Labels {
		labels[i] = LabelConfidence{Name: l.Name, Confidence: l.Confidence}
		features[l.Name] = l.Features
	}
	spark := make([]float64, len(series))
	for i, p := range series {
		spark[i] = p.Close
	}
	insight := templateInsight(sc, s.cfg.Tone)
	if s.coach != nil {
		t0 := time.Now()
		ind, err := s.coach.Indicators(ctx, IndicatorsRequest{TradeID: sc.Trade.ID, Symbol: sc.Trade.Symbol, TS: sc.Trade.TS, Series: series})
		s.m.ai.WithLabelValues(CoachIndicatorsPath).Observe(time.Since(t0).Seconds())
		if err != nil {
			return reflectOut{}, err
		}
		features["indicators"] = ind
		t0 = time.Now()
		insight, err = s.coach.Reflect(ctx, ReflectRequest{TradeID: sc.Trade.ID, Labels: labels, Features: features, Tone: s.cfg.Tone})
		s.m.ai.WithLabelValues(CoachReflectPath).Observe(time.Since(t0).Seconds())
		if err != nil {
			return reflectOut{}, err
		}
	}
	return reflectOut{
		eventID: ReflectEventID(sc.Trade.ID, sc.LabelNames()),
		payload: CoachReflect{TradeID: sc.Trade.ID, Labels: labels, Insight: insight, Sparkline: spark, Tone: s.cfg.Tone},
	}, nil
}

// templateInsight is the insight written without an AI coach: one
// sentence per label, in label order, in the tone asked for.
func templateInsight(sc Scored, tone string) string {
	hints := map[string][2]string{
		LabelOvertrading:    {"You traded a lot within the hour; a pause before the next order can help.", "Too many trades within one hour: stop and stick to your plan."},
		LabelRevengeTrading: {"This buy came soon after a losing sale; check it was part of your plan.", "Buying right after a loss is revenge trading: wait before re-entering."},
		LabelSizeEscalation: {"This position is much larger than your recent ones; mind your risk.", "Position size doubled against your recent trades: cut it back."},
	}
	i := 0
	if tone == ToneStrict {
		i = 1
	}
	parts := []string{fmt.Sprintf("%s %s %s at %s:", sc.Trade.Side, exactString(sc.Trade.Qty), sc.Trade.Symbol, exactString(sc.Trade.Price))}
	for _, l := range sc.Labels {
		if h, ok := hints[l.Name]; ok {
			parts = append(parts, h[i])
		}
	}
	return strings.Join(parts, " ")
}

// LoadHistory reads a user's trades in history order, (ts, broker,
// ext_id), with their exact decimals.
func LoadHistory(ctx context.Context, db *pgxpool.Pool, userID string) ([]Trade, error) {
	rows, err := db.Query(ctx, `SELECT id::text, user_id, broker, ext_id, symbol, side, qty::text, price::text, fee::text, ts
		FROM trades WHERE user_id = $1 ORDER BY ts, broker, ext_id`, userID)
	if err != nil {
		return nil, fmt.Errorf("load the trades of %s: %w", userID, err)
	}
	defer rows.Close()
	var out []Trade
	for rows.Next() {
		var t Trade
		var side, qty, price, fee string
		if err := rows.Scan(&t.ID, &t.UserID, &t.Broker, &t.ExtID, &t.Symbol, &side, &qty, &price, &fee, &t.TS); err != nil {
			return nil, fmt.Errorf("load the trades of %s: %w", userID, err)
		}
		t.Side, t.TS = Side(side), t.TS.UTC()
		for _, f := range []struct {
			text string
			dst  *decimal.Decimal
		}{{qty, &t.Qty}, {price, &t.Price}, {fee, &t.Fee}} {
			if *f.dst, err = decimal.NewFromString(f.text); err != nil {
				return nil, fmt.Errorf("trade %s: decimal %q: %w", t.ID, f.text, err)
			}
		}
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("load the trades of %s: %w", userID, err)
	}
	// The database's collation may order broker and ext_id differently
	// from byte order: history order is byte order.
	SortHistory(out)
	return out, nil
}

// loadTags reads the bias_tags rows of the trades ids, by trade id.
func loadTags(ctx context.Context, db *pgxpool.Pool, ids []string) (map[string][]tagRow, error) {
	out := map[string][]tagRow{}
	if len(ids) == 0 {
		return out, nil
	}
	rows, err := db.Query(ctx, `SELECT trade_id::text, label, COALESCE(reflect_event_id, ''), reflected_at
		FROM bias_tags WHERE trade_id = ANY($1::uuid[])`, ids)
	if err != nil {
		return nil, fmt.Errorf("load bias_tags: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		var r tagRow
		if err := rows.Scan(&id, &r.label, &r.reflectID, &r.reflectedAt); err != nil {
			return nil, fmt.Errorf("load bias_tags: %w", err)
		}
		out[id] = append(out[id], r)
	}
	return out, rows.Err()
}

// SparklineBars is how many hourly closes before a trade its
// coach.reflect's sparkline (and the coach's series) holds, at most.
const SparklineBars = 24

// loadSeries reads the last SparklineBars hourly closes of symbol at or
// before ts from market_bars, oldest first (none: an empty series).
func loadSeries(ctx context.Context, db *pgxpool.Pool, symbol string, ts time.Time) ([]SeriesPoint, error) {
	rows, err := db.Query(ctx, `SELECT ts, close::float8 FROM market_bars
		WHERE symbol = $1 AND granularity = '1h' AND ts <= $2 ORDER BY ts DESC LIMIT $3`, symbol, ts, SparklineBars)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []SeriesPoint{}
	for rows.Next() {
		var p SeriesPoint
		if err := rows.Scan(&p.TS, &p.Close); err != nil {
			return nil, err
		}
		p.TS = p.TS.UTC()
		out = append(out, p)
	}
	slices.Reverse(out)
	return out, rows.Err()
}

// ScoredRecord is the trade.scored record of sc on topic (key: the user
// id), event id TradeScoredEventID of its payload.
func ScoredRecord(topic string, sc Scored, at time.Time) (*kgo.Record, error) {
	p := sc.Payload()
	pj, err := json.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("encode trade.scored %s: %w", sc.Trade.ID, err)
	}
	v, err := json.Marshal(Event[json.RawMessage]{EventID: TradeScoredEventID(sc.Trade.ID, pj), Type: TypeTradeScored, Timestamp: at.UTC(), Payload: pj})
	if err != nil {
		return nil, fmt.Errorf("encode trade.scored %s: %w", sc.Trade.ID, err)
	}
	return &kgo.Record{Topic: topic, Key: []byte(sc.Trade.UserID), Value: v}, nil
}

// scoreSink makes a request's effects durable in order: one transaction
// writing bias_tags (labels upserted, lost labels deleted, a changed
// label set's reflect_event_id set with reflected_at NULL), then
// trade.scored per scored trade and coach.reflect per trade whose
// reflection is pending, acknowledged, then reflected_at set for those.
// A crash before the mark re-sends the pending coach.reflect with the same
// event id when the request is redelivered.
type scoreSink struct {
	cfg  ScoreConfig
	db   *pgxpool.Pool
	prod *kgo.Client
	m    *scoreMetrics
}

func (s *scoreSink) Write(ctx context.Context, batch []scoreOut) error {
	var rej stages.Rejections
	for i, out := range batch {
		err := s.write(ctx, out)
		var pe *pgconn.PgError
		switch {
		case err == nil:
		case errors.As(err, &pe) && (strings.HasPrefix(pe.Code, "22") || strings.HasPrefix(pe.Code, "23")):
			rej.Items = append(rej.Items, stages.Rejection{Index: i, Rule: "pg." + pe.Code, Err: err})
		default:
			return err
		}
	}
	if len(rej.Items) > 0 {
		return &rej
	}
	return nil
}

// pendingReflect is a bias_tags reflection left unpublished by the
// transaction.
type pendingReflect struct {
	tradeID, eventID string
}

// pendingReflections reads the reflections of the trades ids that are
// not marked published.
func pendingReflections(ctx context.Context, tx pgx.Tx, ids []string) ([]pendingReflect, error) {
	rows, err := tx.Query(ctx, `SELECT DISTINCT trade_id::text, reflect_event_id FROM bias_tags
		WHERE trade_id = ANY($1::uuid[]) AND reflected_at IS NULL ORDER BY 1`, ids)
	if err != nil {
		return nil, fmt.Errorf("read the pending reflections: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (pendingReflect, error) {
		var p pendingReflect
		return p, r.Scan(&p.tradeID, &p.eventID)
	})
}

func (s *scoreSink) write(ctx context.Context, out scoreOut) error {
	now := s.cfg.Now().UTC()
	ids := make([]string, 0, len(out.scored))
	for _, sc := range out.scored {
		ids = append(ids, sc.Trade.ID)
	}
	// A reflection already pending before this transaction is a repeat: its
	// publication was not marked (a crash, a failed mark retried).
	var before, pending []pendingReflect
	err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		var err error
		if before, err = pendingReflections(ctx, tx, ids); err != nil {
			return err
		}
		b := &pgx.Batch{}
		for _, sc := range out.scored {
			names := sc.LabelNames()
			b.Queue(`DELETE FROM bias_tags WHERE trade_id = $1 AND NOT (label = ANY($2::text[]))`, sc.Trade.ID, names)
			if len(names) == 0 {
				continue
			}
			rid := ReflectEventID(sc.Trade.ID, names)
			for _, l := range sc.Labels {
				features, err := json.Marshal(l.Features)
				if err != nil {
					return fmt.Errorf("encode the features of %s/%s: %w", sc.Trade.ID, l.Name, err)
				}
				b.Queue(`INSERT INTO bias_tags (trade_id, label, confidence, features, rules_version, scored_at, reflect_event_id)
					VALUES ($1, $2, $3, $4, $5, $6, $7)
					ON CONFLICT (trade_id, label) DO UPDATE SET confidence = EXCLUDED.confidence, features = EXCLUDED.features,
						rules_version = EXCLUDED.rules_version, scored_at = EXCLUDED.scored_at`,
					sc.Trade.ID, l.Name, l.Confidence, string(features), RulesVersion, now, rid)
			}
			b.Queue(`UPDATE bias_tags SET reflect_event_id = $2, reflected_at = NULL
				WHERE trade_id = $1 AND reflect_event_id IS DISTINCT FROM $2`, sc.Trade.ID, rid)
		}
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return fmt.Errorf("write the bias_tags of %s: %w", out.userID, err)
		}
		pending, err = pendingReflections(ctx, tx, ids)
		return err
	})
	if err != nil {
		return err
	}

	recs := make([]*kgo.Record, 0, len(out.scored)+len(pending))
	byID := map[string]Scored{}
	for _, sc := range out.scored {
		rec, err := ScoredRecord(s.cfg.BiasTopic, sc, now)
		if err != nil {
			return err
		}
		recs = append(recs, rec)
		byID[sc.Trade.ID] = sc
	}
	// Publish in history order.
	order := map[string]int{}
	for i, sc := range out.scored {
		order[sc.Trade.ID] = i
	}
	slices.SortFunc(pending, func(a, b pendingReflect) int { return order[a.tradeID] - order[b.tradeID] })
	for _, p := range pending {
		r, ok := out.reflects[p.tradeID]
		if !ok || r.eventID != p.eventID {
			// Prepared against another view of bias_tags (cannot happen
			// with one request per batch): write it from the template.
			sc := byID[p.tradeID]
			labels := make([]LabelConfidence, len(sc.Labels))
			for j, l := range sc.Labels {
				labels[j] = LabelConfidence{Name: l.Name, Confidence: l.Confidence}
			}
			r = reflectOut{eventID: p.eventID, payload: CoachReflect{
				TradeID: p.tradeID, Labels: labels, Insight: templateInsight(sc, s.cfg.Tone), Sparkline: []float64{}, Tone: s.cfg.Tone}}
		}
		v, err := json.Marshal(Event[CoachReflect]{EventID: r.eventID, Type: TypeCoachReflect, Timestamp: now, Payload: r.payload})
		if err != nil {
			return fmt.Errorf("encode coach.reflect %s: %w", r.eventID, err)
		}
		recs = append(recs, &kgo.Record{Topic: s.cfg.ReflectTopic, Key: []byte(out.userID), Value: v})
	}
	if err := s.prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		return fmt.Errorf("produce %d trades events of %s: %w", len(recs), out.userID, err)
	}
	for _, p := range pending {
		if _, err := s.db.Exec(ctx, `UPDATE bias_tags SET reflected_at = $3
			WHERE trade_id = $1 AND reflect_event_id = $2 AND reflected_at IS NULL`, p.tradeID, p.eventID, now); err != nil {
			return fmt.Errorf("mark coach.reflect %s published: %w", p.eventID, err)
		}
		s.m.reflected.WithLabelValues(fmt.Sprint(slices.Contains(before, p))).Inc()
		s.m.reflectLatency.Observe(time.Since(out.started).Seconds())
	}
	for _, sc := range out.scored {
		if len(sc.Labels) == 0 {
			s.m.scored.WithLabelValues("none").Inc()
		}
		for _, l := range sc.Labels {
			s.m.scored.WithLabelValues(l.Name).Inc()
		}
	}
	return nil
}
