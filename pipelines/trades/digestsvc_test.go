package trades

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/topics"
)

// week0 is the ISO week of the digest corpus, 2025-01-06 .. 2025-01-13.
var week0 = WeekOf(t0)

// digestCorpus is a scored week of u1: a losing round trip, a revenge
// BUY and a winning SELL of it.
func digestCorpus() []Scored {
	return Score([]Trade{
		at(0, "d00", Buy, "2", "100", "1"),
		at(10*time.Minute, "d01", Sell, "2", "90", "1"),
		at(20*time.Minute, "d02", Buy, "1", "95", "0"),
		at(48*time.Hour, "d03", Sell, "1", "120", "0.5"),
	}, time.Time{})
}

func (h *svcHarness) publishScored(at time.Time, scored ...Scored) {
	h.t.Helper()
	for _, sc := range scored {
		rec, err := ScoredRecord(h.topic(topics.TradesBias), sc, at)
		if err != nil {
			h.t.Fatal(err)
		}
		h.produce(rec.Topic, string(rec.Key), rec.Value)
	}
}

// inWeek is the clock of the digest tests while week0 runs.
var inWeek = t0.Add(72 * time.Hour)

// startInWeek starts a deployment with the clock at inWeek and publishes
// the first n trades of the digest corpus; it returns the corpus.
func (h *svcHarness) startInWeek(n int) (*deployment, []Scored) {
	h.t.Helper()
	h.clock.Set(inWeek)
	d := h.start(h.cfg)
	corpus := digestCorpus()
	h.publishScored(inWeek, corpus[:n]...)
	return d, corpus
}

// digestRow is a digests row.
type digestRow struct {
	id       int64
	revision int
	partial  bool
	agg      Agg
	key      string
}

func (h *svcHarness) digestRow(user string, w Window) (digestRow, bool) {
	h.t.Helper()
	var r digestRow
	var agg []byte
	err := h.pg.Pool.QueryRow(testkit.Context(h.t), `SELECT id, revision, partial, agg, object_key FROM digests
		WHERE user_id = $1 AND period_start = $2`, user, w.Start).Scan(&r.id, &r.revision, &r.partial, &agg, &r.key)
	if err != nil {
		return r, false
	}
	if err := json.Unmarshal(agg, &r.agg); err != nil {
		h.t.Fatal(err)
	}
	return r, true
}

func (h *svcHarness) digestObject(user string, w Window) DigestObject {
	h.t.Helper()
	b, err := h.objects.Get(testkit.Context(h.t), DigestObjectKey(user, w))
	if err != nil {
		h.t.Fatalf("digest object: %v", err)
	}
	var o DigestObject
	if err := json.Unmarshal(b, &o); err != nil {
		h.t.Fatal(err)
	}
	return o
}

func readyOf(t *testing.T, e Event[json.RawMessage]) DigestReady {
	t.Helper()
	var p DigestReady
	if err := json.Unmarshal(e.Payload, &p); err != nil {
		t.Fatal(err)
	}
	return p
}

// The timer emits a window once it is past its end + grace and its last
// change is settle old; a late trade makes revision 2 (after settle); a
// redelivered trade.scored, or a re-score that changes a contribution but
// not the aggregate, makes none; after a restart (the store restored from
// its changelog) no revision is emitted twice.
func TestDigestTimerRevisions(t *testing.T) {
	t.Parallel()
	h := newSvcHarness(t, testkit.ForceFake())
	d, corpus := h.startInWeek(3)
	d.settle(t, 3)
	if got := h.events(topics.DigestReady); len(got) != 0 {
		t.Fatalf("digest emitted inside the week: %v", ids(got))
	}

	// Past the end, within the grace: nothing yet.
	h.clock.Set(week0.End.Add(59 * time.Minute))
	d.settle(t, 3)
	if got := h.events(topics.DigestReady); len(got) != 0 {
		t.Fatalf("digest emitted within the grace: %v", ids(got))
	}
	h.clock.Set(week0.End.Add(time.Hour))
	ev := h.waitEvents(topics.DigestReady, 1)[0]
	ready := readyOf(t, ev)
	if ev.EventID != "dr-u1-2025-01-06-r1" || ready.Revision != 1 || ready.Partial || ready.UserID != "u1" ||
		ready.Period != (Period{"2025-01-06", "2025-01-13"}) || ready.ObjectKey != "digests/u1/2025-01-06-2025-01-13.json" {
		t.Errorf("digest.ready %s %+v", ev.EventID, ready)
	}
	want1 := Aggregate(week0, map[string]TradeScored{corpus[0].Trade.ID: corpus[0].Payload(), corpus[1].Trade.ID: corpus[1].Payload(), corpus[2].Trade.ID: corpus[2].Payload()})
	if want1.Trades != 3 || want1.Buys != 2 || want1.Sells != 1 {
		t.Fatalf("corpus aggregate %+v", want1)
	}
	row, ok := h.digestRow("u1", week0)
	if !ok || row.id != ready.DigestID || row.revision != 1 || row.partial || aggJSON(t, row.agg) != aggJSON(t, want1) || row.key != ready.ObjectKey {
		t.Errorf("digests row %+v (found %v), want id %d revision 1 agg %s", row, ok, ready.DigestID, aggJSON(t, want1))
	}
	obj := h.digestObject("u1", week0)
	if obj.UserID != "u1" || obj.Period != ready.Period || obj.Revision != 1 || obj.Partial || aggJSON(t, obj.Agg) != aggJSON(t, want1) {
		t.Errorf("digest object %+v", obj)
	}
	if n := testkit.Metric(t, d.reg, "sluice_trades_digests_emitted_total", "kind", "first"); n != 1 {
		t.Errorf("digests_emitted_total{kind=first} = %v", n)
	}

	// A late trade: no revision before it settled, revision 2 after.
	late := h.clock.Now()
	h.publishScored(late, corpus[3])
	d.settle(t, 4)
	if got := h.events(topics.DigestReady); len(got) != 1 {
		t.Fatalf("late trade emitted before settling: %v", ids(got))
	}
	h.clock.Set(late.Add(31 * time.Second))
	ev = h.waitEvents(topics.DigestReady, 2)[1]
	if ev.EventID != "dr-u1-2025-01-06-r2" || readyOf(t, ev).Revision != 2 {
		t.Errorf("late trade: %s %+v", ev.EventID, readyOf(t, ev))
	}
	want2 := Aggregate(week0, map[string]TradeScored{corpus[0].Trade.ID: corpus[0].Payload(), corpus[1].Trade.ID: corpus[1].Payload(),
		corpus[2].Trade.ID: corpus[2].Payload(), corpus[3].Trade.ID: corpus[3].Payload()})
	if obj := h.digestObject("u1", week0); obj.Revision != 2 || aggJSON(t, obj.Agg) != aggJSON(t, want2) {
		t.Errorf("revision 2 object %+v", obj)
	}
	if n := testkit.Metric(t, d.reg, "sluice_trades_digests_emitted_total", "kind", "revision"); n != 1 {
		t.Errorf("digests_emitted_total{kind=revision} = %v", n)
	}

	// Redelivered trade.scored, and a contribution whose change leaves the
	// aggregate as it is (lot_labels are not aggregated): no revision.
	h.publishScored(h.clock.Now(), corpus...)
	changed := corpus[3].Payload()
	changed.LotLabels = append(changed.LotLabels, "not_aggregated")
	h.produce(h.topic(topics.TradesBias), "u1", Event[TradeScored]{EventID: "ts-x", Type: TypeTradeScored, Timestamp: h.clock.Now(), Payload: changed})
	d.settle(t, 9)
	h.clock.Set(h.clock.Now().Add(time.Minute))
	d.settle(t, 9)
	if got := h.events(topics.DigestReady); len(got) != 2 {
		t.Fatalf("unchanged aggregate made a revision: %v", ids(got))
	}

	// Restart: the store is restored; nothing is emitted again.
	d.stop()
	h.clock.Set(h.clock.Now().Add(time.Hour))
	d2 := h.start(h.cfg)
	d2.settle(t, 0)
	d2.settle(t, 0)
	if got := h.events(topics.DigestReady); len(got) != 2 {
		t.Fatalf("restart re-emitted: %v", ids(got))
	}
	if row, _ := h.digestRow("u1", week0); row.revision != 2 {
		t.Errorf("digests revision %d after restart, want 2", row.revision)
	}
	if n := testkit.Metric(t, d2.reg, "sluice_trades_digest_windows"); n != 1 {
		t.Errorf("digest_windows = %v, want 1", n)
	}

	// Past the horizon the window and its contributions are forgotten,
	// and a trade of that week is refused.
	h.clock.Set(week0.End.Add(DefaultDigestHorizon))
	d2.settle(t, 0)
	if n := testkit.Metric(t, d2.reg, "sluice_trades_digest_windows"); n != 0 {
		t.Errorf("digest_windows = %v after the horizon, want 0", n)
	}
	h.publishScored(h.clock.Now(), corpus[0])
	testkit.WaitFor(t, 20*time.Second, "expired window dead letter", func() bool { return len(h.dlq()) == 1 })
	if dl := h.dlq(); dl[0] != [2]string{"sanity_fail", RuleDigestWindowExpired} {
		t.Errorf("dead letter %v", dl)
	}
	d2.stop()
	st, err := NewDigestStore(h.topic(topics.TradesDigestState))
	if err != nil {
		t.Fatal(err)
	}
	state, err := st.Read(testkit.Context(t), h.k.Opts(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	for p, keys := range state {
		if len(keys) != 0 {
			t.Errorf("partition %d keeps %d keys past the horizon", p, len(keys))
		}
	}
}

// digest.request emits at once: partial before the week's end, zeros for
// a week without trades; the API sends it too (400 on a bad week).
func TestDigestRequest(t *testing.T) {
	t.Parallel()
	h := newSvcHarness(t, testkit.ForceFake())
	d, corpus := h.startInWeek(len(digestCorpus()))
	bias := h.topic(topics.TradesBias)
	h.produce(bias, "u1", Event[DigestRequest]{EventID: "rq-1", Type: TypeDigestRequest, Payload: DigestRequest{UserID: "u1", PeriodStart: "2025-01-06"}})
	ev := h.waitEvents(topics.DigestReady, 1)[0]
	if r := readyOf(t, ev); ev.EventID != "dr-u1-2025-01-06-r1" || !r.Partial || r.Revision != 1 {
		t.Errorf("requested digest %s %+v", ev.EventID, r)
	}
	if obj := h.digestObject("u1", week0); !obj.Partial || obj.Agg.Trades != len(corpus) {
		t.Errorf("partial object %+v", obj)
	}

	// Through the API: an empty week, zeros.
	srv := httptest.NewServer(d.ops.Handler())
	defer srv.Close()
	post := func(body string) int {
		resp, err := http.Post(srv.URL+"/api/v1/trades/digests", "application/json", bytes.NewReader([]byte(body)))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := post(`{"user_id":"u1","week":"2024-W50"}`); code != http.StatusAccepted {
		t.Fatalf("POST digests: %d", code)
	}
	for _, bad := range []string{`{"user_id":"u1","week":"2024-W99"}`, `{"user_id":"a@b.c","week":"2024-W50"}`, `{"user_id":"u1"}`, `{"user":"u1"}`} {
		if code := post(bad); code != http.StatusBadRequest {
			t.Errorf("POST %s: %d, want 400", bad, code)
		}
	}
	w50, _ := ParseISOWeek("2024-W50")
	ev = h.waitEvents(topics.DigestReady, 2)[1]
	if r := readyOf(t, ev); r.Period.Start != "2024-12-09" || r.Partial || r.Revision != 1 {
		t.Errorf("empty week digest %+v", r)
	}
	obj := h.digestObject("u1", w50)
	if obj.Agg.Trades != 0 || !obj.Agg.Notional.IsZero() || obj.Agg.TopInsight != nil || obj.Agg.CountsByLabel == nil {
		t.Errorf("empty week aggregate %+v", obj.Agg)
	}
	if n := testkit.Metric(t, d.reg, "sluice_trades_digests_emitted_total", "kind", "requested"); n != 2 {
		t.Errorf("digests_emitted_total{kind=requested} = %v", n)
	}

	// The same request again re-emits revision 1 (same id); after the
	// week (and its grace) the timer emits the final revision 2.
	h.produce(bias, "u1", Event[DigestRequest]{EventID: "rq-2", Type: TypeDigestRequest, Payload: DigestRequest{UserID: "u1", PeriodStart: "2025-01-06"}})
	if ev := h.waitEvents(topics.DigestReady, 3)[2]; ev.EventID != "dr-u1-2025-01-06-r1" {
		t.Errorf("repeated request: %s", ev.EventID)
	}
	h.clock.Set(week0.End.Add(2 * time.Hour))
	ev = h.waitEvents(topics.DigestReady, 4)[3]
	if r := readyOf(t, ev); ev.EventID != "dr-u1-2025-01-06-r2" || r.Partial {
		t.Errorf("final digest after a partial one: %s %+v", ev.EventID, r)
	}
}

// trade.scored without realized_pnl is refused by rule trades.scored,
// undecodable values by reason.
func TestDigestInputRules(t *testing.T) {
	t.Parallel()
	h := newSvcHarness(t, testkit.ForceFake())
	h.clock.Set(t0.Add(time.Hour))
	h.start(h.cfg)
	bias := h.topic(topics.TradesBias)
	p := digestCorpus()[0].Payload()
	p.RealizedPnL = nil
	h.produce(bias, "u1", Event[TradeScored]{EventID: "x1", Type: TypeTradeScored, Payload: p})
	h.produce(bias, "u1", []byte(`{"event_id":"x2","type":"trade.scored","payload":[1]}`))
	h.produce(bias, "u1", []byte{0xff, 0xfe})
	h.produce(bias, "u1", Event[DigestRequest]{EventID: "x3", Type: TypeDigestRequest, Payload: DigestRequest{UserID: "u1", PeriodStart: "2025-01-07"}})
	var got [][2]string
	testkit.WaitFor(t, 20*time.Second, "dead letters", func() bool { got = h.dlq(); return len(got) >= 4 })
	want := [][2]string{{"sanity_fail", RuleScored}, {"sanity_fail", RuleScored}, {"decode_error", ""}, {"sanity_fail", ""}}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("dead letter %d: %v, want %v", i, got[i], want[i])
		}
	}
}

// The digest of a window depends only on the set of its scored trades:
// u2's trade.scored stream (u1's trades, shuffled, some of them sent twice
// and one first in an older version) gives the aggregate of u1's, sent
// once in order.
func TestDigestIgnoresOrderAndDuplicates(t *testing.T) {
	t.Parallel()
	h := newSvcHarness(t, testkit.ForceFake())
	_, corpus := h.startInWeek(len(digestCorpus()))
	bias := h.topic(topics.TradesBias)
	send := func(p TradeScored) {
		p.UserID = "u2"
		h.produce(bias, "u2", Event[TradeScored]{EventID: "x", Type: TypeTradeScored, Timestamp: inWeek, Payload: p})
	}
	older := corpus[1].Payload()
	older.Labels = []string{LabelOvertrading}
	send(older)
	for _, i := range []int{3, 1, 3, 0, 2, 1, 0} {
		send(corpus[i].Payload())
	}
	for _, u := range []string{"u1", "u2"} {
		h.produce(bias, u, Event[DigestRequest]{EventID: "rq-" + u, Type: TypeDigestRequest, Payload: DigestRequest{UserID: u, PeriodStart: "2025-01-06"}})
	}
	h.waitEvents(topics.DigestReady, 2)
	a1, a2 := h.digestObject("u1", week0).Agg, h.digestObject("u2", week0).Agg
	if a1.Trades != len(corpus) || aggJSON(t, a1) != aggJSON(t, a2) {
		t.Errorf("digests differ:\nu1 %s\nu2 %s", aggJSON(t, a1), aggJSON(t, a2))
	}
}
