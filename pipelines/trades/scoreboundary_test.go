package trades

import (
	"testing"
	"time"
)

// Score keeps the trades with ts >= since: one exactly at since is
// scored, one a nanosecond before is not (but still counts in the
// history of the later ones).
func TestScoreSinceBoundary(t *testing.T) {
	h := []Trade{
		at(-time.Nanosecond, "before", Buy, "1", "100", "0"),
		at(0, "at", Sell, "1", "90", "0"),
	}
	scored := Score(h, t0)
	if len(scored) != 1 || scored[0].Trade.ExtID != "at" {
		t.Fatalf("scored %+v, want only the trade at since", scored)
	}
	if got := scored[0].Realized.String(); got != "-10" {
		t.Errorf("realized %s, want -10 (the BUY before since is its lot)", got)
	}
}

// reflectPending decides which trades get a coach.reflect: a changed
// non-empty label set, the stored set still unpublished, never a trade
// without labels or one already published.
func TestReflectPending(t *testing.T) {
	published := time.Date(2025, 1, 7, 0, 0, 0, 0, time.UTC)
	sc := Score([]Trade{at(0, "x", Buy, "1", "1", "0")}, time.Time{})[0]
	labelled := sc
	labelled.Labels = []Label{{Name: LabelOvertrading}, {Name: LabelSizeEscalation}}
	id := ReflectEventID(sc.Trade.ID, []string{LabelOvertrading, LabelSizeEscalation})
	oldID := ReflectEventID(sc.Trade.ID, []string{LabelOvertrading})
	cases := []struct {
		name    string
		sc      Scored
		rows    []tagRow
		pending bool
	}{
		{"no labels, no rows", sc, nil, false},
		{"labels lost", sc, []tagRow{{LabelOvertrading, oldID, &published}}, false},
		{"new labels", labelled, nil, true},
		{"a label added", labelled, []tagRow{{LabelOvertrading, oldID, &published}}, true},
		{"same set, published", labelled, []tagRow{{LabelOvertrading, id, &published}, {LabelSizeEscalation, id, &published}}, false},
		{"same set, unpublished", labelled, []tagRow{{LabelSizeEscalation, id, nil}, {LabelOvertrading, id, nil}}, true},
	}
	for _, c := range cases {
		if got := reflectPending(c.sc, c.rows); got != c.pending {
			t.Errorf("%s: pending %t, want %t", c.name, got, c.pending)
		}
	}
}
