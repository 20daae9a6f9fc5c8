package trades

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/topics"
)

// tagRows is bias_tags as "trade_id|label|reflect_event_id|reflected_at".
func (h *svcHarness) tagRows() []string {
	h.t.Helper()
	rows, err := h.pg.Pool.Query(testkit.Context(h.t), `SELECT trade_id::text || '|' || label || '|' || COALESCE(reflect_event_id, '') || '|' ||
		COALESCE(reflected_at::text, 'NULL') FROM bias_tags ORDER BY 1`)
	if err != nil {
		h.t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			h.t.Fatal(err)
		}
		out = append(out, s)
	}
	return out
}

// On the real stack (Kafka, PostgreSQL, S3 from the environment; skipped
// without them): a score.request over a known corpus gives its bias_tags,
// one coach.reflect per labelled trade, the week's digest (row, object,
// digest.ready); replaying trades.events from the earliest offset changes
// none of them.
func TestScoreDigestRealStack(t *testing.T) {
	t.Parallel()
	h := newSvcHarness(t)
	testkit.RequireReal(t, h.k, h.pg, h.store)
	h.clock.Set(scoreNow)
	corpus := scoreCorpus()
	h.insertTrades(corpus...)
	d := h.start(h.cfg)
	h.produce(h.topic(topics.TradesEvents), "u1", scoreRequest("u1", "2025-01-06"))

	reflects := h.waitEvents(topics.CoachReflect, 2)
	a02, a07 := corpus[2].ID, corpus[7].ID
	if got, want := ids(reflects), []string{ReflectEventID(a02, []string{LabelRevengeTrading}), ReflectEventID(a07, []string{LabelSizeEscalation})}; !slices.Equal(got, want) {
		t.Fatalf("coach.reflect %v, want %v", got, want)
	}
	var tags []string
	testkit.WaitFor(t, 30*time.Second, "bias_tags marked", func() bool {
		tags = h.tagRows()
		return len(tags) == 2 && !slices.ContainsFunc(tags, func(s string) bool { return strings.HasSuffix(s, "|NULL") })
	})
	for _, want := range []string{a02 + "|" + LabelRevengeTrading + "|" + reflects[0].EventID + "|", a07 + "|" + LabelSizeEscalation + "|" + reflects[1].EventID + "|"} {
		if !slices.ContainsFunc(tags, func(s string) bool { return strings.HasPrefix(s, want) }) {
			t.Errorf("bias_tags %v lack a row %s…", tags, want)
		}
	}
	d.settle(t, len(corpus))
	h.clock.Set(scoreNow.Add(time.Minute))
	ready := h.waitEvents(topics.DigestReady, 1)
	if ready[0].EventID != "dr-u1-2025-01-06-r1" {
		t.Errorf("digest.ready %s", ready[0].EventID)
	}
	want := map[string]TradeScored{}
	for _, sc := range Score(corpus, time.Time{}) {
		want[sc.Trade.ID] = sc.Payload()
	}
	wantAgg := Aggregate(week0, want)
	if wantAgg.Trades != 8 || wantAgg.CountsByLabel[LabelRevengeTrading] != 1 || wantAgg.CountsByLabel[LabelSizeEscalation] != 1 {
		t.Fatalf("corpus aggregate %+v", wantAgg)
	}
	row, ok := h.digestRow("u1", week0)
	if !ok || row.revision != 1 || row.partial || aggJSON(t, row.agg) != aggJSON(t, wantAgg) || row.id != readyOf(t, ready[0]).DigestID {
		t.Errorf("digests row %+v (found %v)", row, ok)
	}
	if obj := h.digestObject("u1", week0); obj.Revision != 1 || aggJSON(t, obj.Agg) != aggJSON(t, wantAgg) || obj.Period != week0.Period() {
		t.Errorf("digest object %+v", obj)
	}
	scored := len(h.events(topics.TradesBias))

	// Replay trades.events from the earliest offset.
	d.stop()
	adm := h.adm()
	ctx := testkit.Context(t)
	var reset kadm.Offsets
	for p := range int32(3) {
		reset.AddOffset(h.topic(topics.TradesEvents), p, 0, -1)
	}
	if err := adm.CommitAllOffsets(ctx, h.naming.Group(ScoreName), reset); err != nil {
		t.Fatalf("reset offsets: %v", err)
	}
	d2 := h.start(h.cfg)
	h.waitEvents(topics.TradesBias, 2*scored)
	d2.settle(t, len(corpus))
	h.clock.Set(scoreNow.Add(time.Hour))
	d2.settle(t, len(corpus))
	if got := h.events(topics.CoachReflect); len(got) != 2 {
		t.Errorf("replay re-sent coach.reflect: %v", ids(got))
	}
	if got := h.events(topics.DigestReady); len(got) != 1 {
		t.Errorf("replay emitted digests: %v", ids(got))
	}
	if got := h.tagRows(); !slices.Equal(got, tags) {
		t.Errorf("replay changed bias_tags:\n%v\n%v", got, tags)
	}
	if row2, _ := h.digestRow("u1", week0); row2.revision != 1 || aggJSON(t, row2.agg) != aggJSON(t, wantAgg) {
		t.Errorf("replay changed the digests row: %+v", row2)
	}
}
