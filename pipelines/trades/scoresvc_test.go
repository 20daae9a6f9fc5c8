package trades

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/topics"
)

// scoreNow is the services' clock in the score tests: after the corpus.
var scoreNow = time.Date(2025, 1, 20, 12, 0, 0, 0, time.UTC)

// scoreCorpus is eight trades of u1 on Monday 2025-01-06: a02 is revenge
// trading (a BUY 10 minutes after a SELL at a loss), a07 size escalation
// (a BUY of 10 × the notional of the seven before); the others have no
// label.
func scoreCorpus() []Trade {
	return []Trade{
		at(0, "a00", Buy, "1", "100", "0"),
		at(10*time.Minute, "a01", Sell, "1", "90", "0.5"),
		at(20*time.Minute, "a02", Buy, "1", "95", "0"),
		at(30*time.Minute, "a03", Buy, "1", "100", "0"),
		at(31*time.Minute, "a04", Buy, "1", "100", "0"),
		at(32*time.Minute, "a05", Buy, "1", "100", "0"),
		at(33*time.Minute, "a06", Buy, "1", "100", "0"),
		at(40*time.Minute, "a07", Buy, "10", "100", "0"),
	}
}

func scoreRequest(user, since string) Event[ScoreRequest] {
	return Event[ScoreRequest]{EventID: "sr-" + user + "-" + since, Type: TypeScoreRequest, Timestamp: scoreNow,
		Payload: ScoreRequest{UserID: user, Since: since}}
}

// tagsOf returns label → reflected (reflected_at set) of a trade's rows.
func (h *svcHarness) tagsOf(tradeID string) map[string]bool {
	h.t.Helper()
	rows, err := h.pg.Pool.Query(testkit.Context(h.t), `SELECT label, reflected_at IS NOT NULL FROM bias_tags WHERE trade_id = $1`, tradeID)
	if err != nil {
		h.t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]bool{}
	for rows.Next() {
		var l string
		var ok bool
		if err := rows.Scan(&l, &ok); err != nil {
			h.t.Fatal(err)
		}
		out[l] = ok
	}
	return out
}

func ids(evs []Event[json.RawMessage]) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.EventID
	}
	return out
}

// coach.reflect is published once per (trade, label set): a second score
// of the same trades sends none; a pending one (published, not marked:
// a crash between the acks and the mark) is re-sent with the same event
// id; a trade whose label set changes gets the new set's id, and a lost
// label's row is deleted.
func TestScoreReflectOncePerLabelSet(t *testing.T) {
	t.Parallel()
	h := newSvcHarness(t, testkit.ForceFake())
	h.clock.Set(scoreNow)
	corpus := scoreCorpus()
	h.insertTrades(corpus...)
	d := h.start(h.cfg)
	events := h.topic(topics.TradesEvents)

	h.produce(events, "u1", scoreRequest("u1", "2025-01-06"))
	first := h.waitEvents(topics.CoachReflect, 2)
	a02, a07 := corpus[2].ID, corpus[7].ID
	want := []string{ReflectEventID(a02, []string{LabelRevengeTrading}), ReflectEventID(a07, []string{LabelSizeEscalation})}
	if got := ids(first); !slices.Equal(got, want) {
		t.Fatalf("coach.reflect ids %v, want %v", got, want)
	}
	var p CoachReflect
	if err := json.Unmarshal(first[0].Payload, &p); err != nil {
		t.Fatal(err)
	}
	if p.TradeID != a02 || len(p.Labels) != 1 || p.Labels[0] != (LabelConfidence{LabelRevengeTrading, RevengeConfidence}) ||
		p.Tone != ToneSupportive || !strings.Contains(p.Insight, "losing sale") || p.Sparkline == nil {
		t.Errorf("coach.reflect payload %+v", p)
	}
	scored := h.waitEvents(topics.TradesBias, len(corpus))
	testkit.WaitFor(t, 10*time.Second, "reflections marked", func() bool {
		return h.tagsOf(a02)[LabelRevengeTrading] && h.tagsOf(a07)[LabelSizeEscalation]
	})
	for _, e := range scored {
		if e.Type != TypeTradeScored {
			t.Errorf("trades.bias carries %s", e.Type)
		}
	}
	if n := testkit.Metric(t, d.reg, "sluice_trades_scored_total", "label", "none"); n != 6 {
		t.Errorf("scored_total{label=none} = %v, want 6", n)
	}

	// The same request again: trade.scored again (same ids), no reflect.
	h.produce(events, "u1", scoreRequest("u1", "2025-01-06"))
	again := h.waitEvents(topics.TradesBias, 2*len(corpus))
	if !slices.Equal(ids(again[:len(corpus)]), ids(again[len(corpus):])) {
		t.Errorf("a re-score changed trade.scored ids:\n%v\n%v", ids(again[:len(corpus)]), ids(again[len(corpus):]))
	}
	if got := h.events(topics.CoachReflect); len(got) != 2 {
		t.Fatalf("re-score published coach.reflect again: %v", ids(got))
	}

	// a07's publication was not marked: the next request re-sends it.
	if _, err := h.pg.Pool.Exec(testkit.Context(t), `UPDATE bias_tags SET reflected_at = NULL WHERE trade_id = $1`, a07); err != nil {
		t.Fatal(err)
	}
	h.produce(events, "u1", scoreRequest("u1", "2025-01-06"))
	third := h.waitEvents(topics.CoachReflect, 3)
	if third[2].EventID != want[1] {
		t.Errorf("re-sent coach.reflect id %s, want %s", third[2].EventID, want[1])
	}
	testkit.WaitFor(t, 10*time.Second, "re-sent reflection marked", func() bool { return h.tagsOf(a07)[LabelSizeEscalation] })
	if n := testkit.Metric(t, d.reg, "sluice_trades_reflect_published_total", "repeat", "true"); n != 1 {
		t.Errorf("reflect_published_total{repeat=true} = %v, want 1", n)
	}

	// Two more trades in a07's hour: a07 is now the 10th of its window.
	extra := []Trade{at(34*time.Minute, "a06b", Buy, "1", "100", "0"), at(35*time.Minute, "a06c", Buy, "1", "100", "0")}
	h.insertTrades(extra...)
	h.produce(events, "u1", scoreRequest("u1", "2025-01-06"))
	fourth := h.waitEvents(topics.CoachReflect, 4)
	if id := ReflectEventID(a07, []string{LabelOvertrading, LabelSizeEscalation}); fourth[3].EventID != id {
		t.Errorf("changed label set: coach.reflect %s, want %s", fourth[3].EventID, id)
	}
	testkit.WaitFor(t, 10*time.Second, "a07's two labels", func() bool { return len(h.tagsOf(a07)) == 2 })

	// They go again: overtrading is lost (its row deleted), and the set
	// {size_escalation} is a change again.
	if _, err := h.pg.Pool.Exec(testkit.Context(t), `DELETE FROM trades WHERE ext_id IN ('a06b', 'a06c')`); err != nil {
		t.Fatal(err)
	}
	h.produce(events, "u1", scoreRequest("u1", "2025-01-06"))
	fifth := h.waitEvents(topics.CoachReflect, 5)
	if fifth[4].EventID != want[1] {
		t.Errorf("label lost: coach.reflect %s, want %s", fifth[4].EventID, want[1])
	}
	testkit.WaitFor(t, 10*time.Second, "overtrading row deleted", func() bool {
		tags := h.tagsOf(a07)
		return len(tags) == 1 && tags[LabelSizeEscalation]
	})
	if got := h.events(topics.CoachReflect); len(got) != 5 {
		t.Errorf("coach.reflect: %v", ids(got))
	}
	if dl := h.dlq(); len(dl) != 0 {
		t.Errorf("dead letters: %v", dl)
	}
}

// With AI_BASE_URL the insight comes from the coach, every call signed
// (the fake coach verifies the HMAC and refuses a replayed nonce), the
// indicators passed on; each call's latency is observed per endpoint.
func TestScoreWithAICoach(t *testing.T) {
	t.Parallel()
	h := newSvcHarness(t, testkit.ForceFake())
	h.clock.Set(scoreNow)
	coach, srv := newFakeCoach(t, scoreNow)
	h.insertTrades(scoreCorpus()...)
	cfg := h.cfg
	cfg.Getenv = func(k string) string {
		return map[string]string{"AI_BASE_URL": srv.URL + "/coach", "AI_HMAC_KEY_ID": "k1", "AI_HMAC_SECRET": "s3cret", "AI_TIMEOUT_MS": "5000"}[k]
	}
	d := h.start(cfg)
	h.produce(h.topic(topics.TradesEvents), "u1", scoreRequest("u1", "2025-01-06"))
	evs := h.waitEvents(topics.CoachReflect, 2)
	var p CoachReflect
	if err := json.Unmarshal(evs[1].Payload, &p); err != nil {
		t.Fatal(err)
	}
	if p.Insight != "size_escalation: take a breath (supportive)" {
		t.Errorf("insight %q, want the coach's", p.Insight)
	}
	coach.mu.Lock()
	var paths []string
	for _, r := range coach.requests {
		paths = append(paths, r.path)
	}
	coach.mu.Unlock()
	slices.Sort(paths)
	if want := []string{"/coach/v1/indicators", "/coach/v1/indicators", "/coach/v1/nlg/reflect", "/coach/v1/nlg/reflect"}; !slices.Equal(paths, want) {
		t.Errorf("coach calls %v, want %v", paths, want)
	}
	for _, ep := range []string{CoachIndicatorsPath, CoachReflectPath} {
		if n := testkit.Metric(t, d.reg, "sluice_trades_ai_request_duration_seconds", "endpoint", ep); n != 2 {
			t.Errorf("ai_request_duration_seconds{endpoint=%s} count %v, want 2", ep, n)
		}
	}
}

// A coach that keeps failing: 3 attempts, then the request is
// dead-lettered as retries_exhausted, rule trades.ai; nothing is written.
func TestScoreAIFailureExhaustsRetries(t *testing.T) {
	t.Parallel()
	h := newSvcHarness(t, testkit.ForceFake())
	h.clock.Set(scoreNow)
	coach, srv := newFakeCoach(t, scoreNow)
	coach.status = http.StatusServiceUnavailable
	h.insertTrades(scoreCorpus()...)
	cfg := h.cfg
	cfg.Score.Coach = CoachConfig{BaseURL: srv.URL + "/coach", KeyID: "k1", Secret: "s3cret"}
	h.start(cfg)
	h.produce(h.topic(topics.TradesEvents), "u1", scoreRequest("u1", "2025-01-06"))
	var recs int
	testkit.WaitFor(t, 30*time.Second, "dead letter", func() bool {
		recs = len(h.k.ReadTopic(t, h.topic(topics.TradesDLQ)))
		return recs > 0
	})
	r := h.k.ReadTopic(t, h.topic(topics.TradesDLQ))[0]
	hs := testkit.Headers(r)
	if hs["dlq.reason"] != "retries_exhausted" || hs["dlq.rule"] != RuleAI || hs["dlq.attempts"] != "3" || hs["dlq.stage"] != ScoreName {
		t.Errorf("dead letter headers %v", hs)
	}
	if got := h.events(topics.TradesBias); len(got) != 0 {
		t.Errorf("trade.scored published for a failed request: %d", len(got))
	}
	var n int
	if err := h.pg.Pool.QueryRow(testkit.Context(t), `SELECT count(*) FROM bias_tags`).Scan(&n); err != nil || n != 0 {
		t.Errorf("bias_tags rows %d (%v), want 0", n, err)
	}
}

// Malformed requests are dead-lettered by rule; other event types of
// trades.events are skipped.
func TestScoreRequestRules(t *testing.T) {
	t.Parallel()
	h := newSvcHarness(t, testkit.ForceFake())
	h.clock.Set(scoreNow)
	h.insertTrades(scoreCorpus()...)
	h.start(h.cfg)
	events := h.topic(topics.TradesEvents)
	h.produce(events, "u1", []byte(`not json`))
	h.produce(events, "u1", []byte(`{"event_id":"x","type":"trade.exploded","payload":{}}`))
	h.produce(events, "bad@mail", scoreRequest("bad@mail", "2025-01-06"))
	h.produce(events, "u2", scoreRequest("u1", "2025-01-06"))
	h.produce(events, "u1", scoreRequest("u1", "2025-02-01"))
	h.produce(events, "u1", scoreRequest("u1", "yesterday"))
	h.produce(events, "u1", Event[ImportProgress]{EventID: "ip-1", Type: TypeImportProgress, Payload: ImportProgress{ImportID: "i"}})
	want := [][2]string{
		{"decode_error", ""}, {"unknown_task_type", ""}, {"sanity_fail", RuleUserID}, {"sanity_fail", RuleKey},
		{"sanity_fail", RuleSince}, {"sanity_fail", RuleSince},
	}
	var got [][2]string
	testkit.WaitFor(t, 30*time.Second, "dead letters", func() bool {
		got = h.dlq()
		return len(got) >= len(want)
	})
	// One partition per key: compare as sets.
	sortPairs := func(p [][2]string) {
		slices.SortFunc(p, func(a, b [2]string) int { return strings.Compare(a[0]+a[1], b[0]+b[1]) })
	}
	sortPairs(got)
	sortPairs(want)
	if !slices.Equal(got, want) {
		t.Errorf("dead letters %v, want %v", got, want)
	}
	// A valid request after them is scored: the skipped import.progress
	// produced nothing.
	h.produce(events, "u1", scoreRequest("u1", "2025-01-06"))
	h.waitEvents(topics.CoachReflect, 2)
	if n := len(h.events(topics.TradesBias)); n != len(scoreCorpus()) {
		t.Errorf("trade.scored %d, want %d", n, len(scoreCorpus()))
	}
}

// market_bars failing (here: gone) is retried like the coach, then the
// request is dead-lettered as retries_exhausted, rule trades.marketdata.
func TestScoreMarketDataFailureExhaustsRetries(t *testing.T) {
	t.Parallel()
	h := newSvcHarness(t, testkit.ForceFake())
	h.clock.Set(scoreNow)
	h.insertTrades(scoreCorpus()...)
	if _, err := h.pg.Pool.Exec(testkit.Context(t), `ALTER TABLE market_bars RENAME TO market_bars_gone`); err != nil {
		t.Fatal(err)
	}
	h.start(h.cfg)
	h.produce(h.topic(topics.TradesEvents), "u1", scoreRequest("u1", "2025-01-06"))
	testkit.WaitFor(t, 30*time.Second, "dead letter", func() bool { return len(h.dlq()) > 0 })
	r := h.k.ReadTopic(t, h.topic(topics.TradesDLQ))[0]
	if hs := testkit.Headers(r); hs["dlq.reason"] != "retries_exhausted" || hs["dlq.rule"] != RuleMarketData || hs["dlq.attempts"] != "3" {
		t.Errorf("dead letter headers %v", hs)
	}
	if got := h.events(topics.CoachReflect); len(got) != 0 {
		t.Errorf("coach.reflect published for a failed request: %v", ids(got))
	}
}

// A failure between the publication and the mark (here: the first mark
// of reflected_at refused by the database) re-sends the pending
// coach.reflect with the same event ids, counted as repeats, until the
// mark succeeds.
func TestScoreReflectResentWhenMarkFails(t *testing.T) {
	t.Parallel()
	h := newSvcHarness(t, testkit.ForceFake())
	h.clock.Set(scoreNow)
	corpus := scoreCorpus()
	h.insertTrades(corpus...)
	// nextval is not rolled back with the failed statement: only the
	// first mark fails.
	for _, q := range []string{
		`CREATE SEQUENCE mark_attempts`,
		`CREATE FUNCTION refuse_first_mark() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF OLD.reflected_at IS NULL AND NEW.reflected_at IS NOT NULL AND nextval('mark_attempts') = 1 THEN
				RAISE EXCEPTION 'injected: mark refused';
			END IF;
			RETURN NEW;
		END $$`,
		`CREATE TRIGGER refuse_first_mark BEFORE UPDATE ON bias_tags FOR EACH ROW EXECUTE FUNCTION refuse_first_mark()`,
	} {
		if _, err := h.pg.Pool.Exec(testkit.Context(t), q); err != nil {
			t.Fatal(err)
		}
	}
	d := h.start(h.cfg)
	h.produce(h.topic(topics.TradesEvents), "u1", scoreRequest("u1", "2025-01-06"))
	evs := h.waitEvents(topics.CoachReflect, 4)
	want := []string{ReflectEventID(corpus[2].ID, []string{LabelRevengeTrading}), ReflectEventID(corpus[7].ID, []string{LabelSizeEscalation})}
	if got := ids(evs); !slices.Equal(got, append(slices.Clone(want), want...)) {
		t.Errorf("coach.reflect %v, want %v twice", got, want)
	}
	testkit.WaitFor(t, 10*time.Second, "reflections marked", func() bool {
		return h.tagsOf(corpus[2].ID)[LabelRevengeTrading] && h.tagsOf(corpus[7].ID)[LabelSizeEscalation]
	})
	if r, f := testkit.Metric(t, d.reg, "sluice_trades_reflect_published_total", "repeat", "true"),
		testkit.Metric(t, d.reg, "sluice_trades_reflect_published_total", "repeat", "false"); r != 2 || f != 0 {
		t.Errorf("reflect_published_total repeat=true %v, repeat=false %v; want 2 and 0", r, f)
	}
	if got := h.events(topics.CoachReflect); len(got) != 4 {
		t.Errorf("coach.reflect after the marks: %v", ids(got))
	}
}
