package trades

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/pipelines"
	"github.com/sluicehq/sluice/topics"
)

// DemoOptions configures DemoScenario. Zero fields take the defaults
// documented on them.
type DemoOptions struct {
	// Prefix of the two user ids, ImportUser = Prefix + "-import" and
	// PushUser = Prefix + "-push" (default "demo-" + the current Unix time
	// in ms, so that every run has new users).
	Prefix string
	// ImportTrades is the number of trades of the synthetic import (default
	// 12: one burst of the synthetic broker, 4 minutes apart). At most 12
	// and at least OvertradingMin: the scenario knows a user is scored when
	// the bias_tags rows Score expects are reflected, so the import's trades
	// must carry labels, and one burst keeps them in one week.
	ImportTrades int
	// Poll is the polling period of the waits (default 200ms).
	Poll time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// DemoSummary is the outcome of DemoScenario, read from Postgres.
type DemoSummary struct {
	ImportUser, PushUser string
	// Window is the ISO week of the digests the scenario requested.
	Window Window
	// Trades is the number of trades stored for the two users.
	Trades int64
	// Tags is the number of bias_tags rows of the two users by label.
	Tags map[string]int64
	// Digests are the digests rows of the two users, by user id.
	Digests []DemoDigest
}

// DemoDigest is one digests row.
type DemoDigest struct {
	UserID    string
	Revision  int
	Partial   bool
	ObjectKey string
}

// DemoSpan is how long DemoPushTrades' pattern lasts, first to last trade.
const DemoSpan = 22 * time.Minute

// DemoPushTrades returns the trades of the demo's push, 2 minutes apart from
// start, with a known bias pattern: five BUYs of 1 DEMO at 100, a SELL of 5
// at 90 (a loss), a BUY 2 minutes later (revenge trading), three more BUYs
// (the tenth trade within the hour starts overtrading), a SELL of 4 at a
// gain and a BUY of 10 (size escalation: its notional is more than twice
// the mean of the ten before it). Score decides the labels.
func DemoPushTrades(start time.Time) []RawTrade {
	type leg struct {
		side       string
		qty, price int
	}
	legs := []leg{
		{"BUY", 1, 100}, {"BUY", 1, 100}, {"BUY", 1, 100}, {"BUY", 1, 100}, {"BUY", 1, 100},
		{"SELL", 5, 90}, {"BUY", 1, 90}, {"BUY", 1, 91}, {"BUY", 1, 92}, {"BUY", 1, 93},
		{"SELL", 4, 95}, {"BUY", 10, 95},
	}
	raw := func(v any) json.RawMessage {
		b, _ := json.Marshal(v) // strings and ints always encode
		return b
	}
	out := make([]RawTrade, len(legs))
	for i, l := range legs {
		out[i] = RawTrade{
			ID: raw(fmt.Sprintf("demo-%02d", i+1)), Symbol: raw("DEMO"), Side: raw(l.side),
			Qty: raw(l.qty), Price: raw(l.price), Fee: raw("0.1"),
			TS: raw(start.Add(time.Duration(i) * 2 * time.Minute).UTC().Format(time.RFC3339)),
		}
	}
	return out
}

// DemoStart is where the demo's trades start at now: 50 minutes ago (so
// that the synthetic import's burst, 44 minutes long, and the push are in
// the past), moved back before the current ISO week's start when that is
// needed to keep both in one week (the first hour of a Monday). Both
// series lie in WeekOf(DemoStart(now)).
func DemoStart(now time.Time) time.Time {
	start := now.UTC().Add(-50 * time.Minute).Truncate(time.Minute)
	const span = 45 * time.Minute
	if w := WeekOf(start); !w.Contains(start.Add(span)) {
		start = w.End.Add(-span - time.Minute)
	}
	return start
}

// DemoScenario sends a synthetic import for one user and a push of
// DemoPushTrades for another, waits until both imports completed and
// trades-score tagged every trade Score labels (the bias_tags rows are
// reflected, so their trade.scored are on trades.bias), then sends a
// digest.request for each user's week (so that it does not wait for the
// grace after the week's end) and waits for the digests rows. The trades
// services must be running against the same Kafka, Postgres and object
// store with the topics of cfg.
func DemoScenario(ctx context.Context, env pipelines.Env, cfg Config, o DemoOptions) (DemoSummary, error) {
	if env.DB == nil {
		return DemoSummary{}, errors.New("trades demo needs PostgreSQL")
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Prefix == "" {
		o.Prefix = fmt.Sprintf("demo-%d", o.Now().UnixMilli())
	}
	if o.ImportTrades == 0 {
		o.ImportTrades = 12
	}
	if o.ImportTrades < OvertradingMin || o.ImportTrades > 12 {
		return DemoSummary{}, fmt.Errorf("trades demo: %d import trades (want %d to 12)", o.ImportTrades, OvertradingMin)
	}
	if o.Poll <= 0 {
		o.Poll = 200 * time.Millisecond
	}
	ic := cfg.Import.withDefaults()
	biasTopic := cfg.Score.BiasTopic
	if biasTopic == "" {
		biasTopic = topics.TradesBias
	}
	now := o.Now()
	start := DemoStart(now)
	sum := DemoSummary{ImportUser: o.Prefix + "-import", PushUser: o.Prefix + "-push", Window: WeekOf(start)}

	cl, err := kgo.NewClient(env.Kafka...)
	if err != nil {
		return sum, fmt.Errorf("trades demo: kafka producer: %w", err)
	}
	defer cl.Close()
	imports := NewImports(cl, env.Kafka, ic)
	imp, err := imports.Import(ctx, ImportRequest{
		UserID: sum.ImportUser, Since: start.Format(time.RFC3339), Broker: BrokerSynthetic,
		Options: &SyntheticOptions{Trades: o.ImportTrades, PageSize: max(1, o.ImportTrades/2)},
	})
	if err != nil {
		return sum, fmt.Errorf("trades demo: %w", err)
	}
	tr, err := json.Marshal(DemoPushTrades(start))
	if err != nil {
		return sum, fmt.Errorf("trades demo: encode the push's trades: %w", err)
	}
	push := PushCommand{UserID: sum.PushUser, Broker: BrokerCoinbase, PushID: "demo", Trades: tr}
	v, err := json.Marshal(push)
	if err != nil {
		return sum, fmt.Errorf("trades demo: encode push: %w", err)
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: ic.ImportTopic, Key: []byte(push.UserID), Value: v}).FirstErr(); err != nil {
		return sum, fmt.Errorf("trades demo: send push: %w", err)
	}

	poll := func(what string, done func() (bool, error)) error {
		t := time.NewTicker(o.Poll)
		defer t.Stop()
		for {
			ok, err := done()
			if err != nil && ctx.Err() == nil {
				return fmt.Errorf("trades demo: %s: %w", what, err)
			}
			if ok {
				return nil
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("trades demo: waiting until %s: %w", what, ctx.Err())
			case <-t.C:
			}
		}
	}
	for _, id := range []string{imp.ImportID, push.ImportID()} {
		err := poll("import "+id+" completed", func() (bool, error) {
			st, err := imports.Status(ctx, id)
			switch {
			case err != nil || st == nil:
				return false, err
			case st.Status == StatusFailed:
				return false, fmt.Errorf("import failed: %s %s %s", st.Reason, st.Rule, st.Error)
			}
			return st.Status == StatusCompleted, nil
		})
		if err != nil {
			return sum, err
		}
	}
	q := NewRequester(cl, ic.EventsTopic, biasTopic)
	for _, user := range []string{sum.ImportUser, sum.PushUser} {
		history, err := LoadHistory(ctx, env.DB, user)
		if err != nil {
			return sum, fmt.Errorf("trades demo: %w", err)
		}
		want := 0
		for _, s := range Score(history, time.Time{}) {
			want += len(s.Labels)
		}
		err = poll("the trades of "+user+" are scored", func() (bool, error) {
			var n int
			err := env.DB.QueryRow(ctx, `SELECT count(*) FROM bias_tags b JOIN trades t ON t.id = b.trade_id
				WHERE t.user_id = $1 AND b.reflected_at IS NOT NULL`, user).Scan(&n)
			return err == nil && n == want, err
		})
		if err != nil {
			return sum, err
		}
		if _, err := q.Digest(ctx, user, sum.Window, o.Now()); err != nil {
			return sum, fmt.Errorf("trades demo: %w", err)
		}
	}
	err = poll("the digests exist", func() (bool, error) {
		var n int
		err := env.DB.QueryRow(ctx, `SELECT count(*) FROM digests WHERE user_id = ANY($1) AND period_start = $2`,
			[]string{sum.ImportUser, sum.PushUser}, sum.Window.Start).Scan(&n)
		return err == nil && n == 2, err
	})
	if err != nil {
		return sum, err
	}
	return sum, sum.read(ctx, env.DB)
}

// read fills the counts of s from db.
func (s *DemoSummary) read(ctx context.Context, db *pgxpool.Pool) error {
	users := []string{s.ImportUser, s.PushUser}
	if err := db.QueryRow(ctx, `SELECT count(*) FROM trades WHERE user_id = ANY($1)`, users).Scan(&s.Trades); err != nil {
		return fmt.Errorf("trades demo: count trades: %w", err)
	}
	rows, err := db.Query(ctx, `SELECT b.label, count(*) FROM bias_tags b JOIN trades t ON t.id = b.trade_id
		WHERE t.user_id = ANY($1) GROUP BY b.label`, users)
	if err != nil {
		return fmt.Errorf("trades demo: count bias_tags: %w", err)
	}
	s.Tags = map[string]int64{}
	for rows.Next() {
		var label string
		var n int64
		if err := rows.Scan(&label, &n); err != nil {
			rows.Close()
			return fmt.Errorf("trades demo: count bias_tags: %w", err)
		}
		s.Tags[label] = n
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("trades demo: count bias_tags: %w", err)
	}
	rows, err = db.Query(ctx, `SELECT user_id, revision, partial, object_key FROM digests
		WHERE user_id = ANY($1) ORDER BY user_id, period_start`, users)
	if err != nil {
		return fmt.Errorf("trades demo: read digests: %w", err)
	}
	defer rows.Close()
	s.Digests = nil
	for rows.Next() {
		var d DemoDigest
		if err := rows.Scan(&d.UserID, &d.Revision, &d.Partial, &d.ObjectKey); err != nil {
			return fmt.Errorf("trades demo: read digests: %w", err)
		}
		s.Digests = append(s.Digests, d)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("trades demo: read digests: %w", err)
	}
	return nil
}

// Labels returns the labels of s.Tags, sorted.
func (s DemoSummary) Labels() []string {
	out := make([]string, 0, len(s.Tags))
	for l := range s.Tags {
		out = append(out, l)
	}
	sort.Strings(out)
	return out
}
