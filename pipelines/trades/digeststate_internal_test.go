package trades

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/shopspring/decimal"
)

// storeAggregate folds seq into a window's contributions as the digest
// stage does (one entry per trade id, the latest version wins), writes
// them as the changelog holds them, reads them back as a restore does and
// aggregates what it read, as an emission does.
func storeAggregate(t *testing.T, user string, w Window, seq []TradeScored) Agg {
	t.Helper()
	m := windowContribs{}
	for _, c := range seq {
		key, enc := encodeContrib(user, contribOf(c))
		m[key] = enc
	}
	raw, err := encodeDigestEntry(digestEntry{User: user, Contribs: m})
	if err != nil {
		t.Fatal(err)
	}
	e, err := decodeDigestEntry(raw)
	if err != nil {
		t.Fatal(err)
	}
	if e.User != user || len(e.Contribs) != len(m) {
		t.Fatalf("restored %q with %d contributions, want %q with %d", e.User, len(e.Contribs), user, len(m))
	}
	var in []contrib
	for key, enc := range e.Contribs {
		if m[key] != enc {
			t.Fatalf("restored contribution %x differs", key)
		}
		c, _, err := decodeContrib(e.User, key, enc)
		if err != nil {
			t.Fatal(err)
		}
		in = append(in, c)
	}
	return aggregate(w, in)
}

// The store's compact contributions give exactly Aggregate's digest for any
// permutation and duplication of the same scored trades — with ids that
// are not derived from (user, broker, ext_id) (other UUIDs, free text),
// brokers and labels outside the known ones, coefficients beyond int64,
// sub-second timestamps — and the latest version of a re-scored trade
// replaces the earlier one.
func TestStoreContributionsAggregateExactly(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	w, _ := ParseISOWeek("2025-W02")
	const user = "u1"
	for round := range 60 {
		var payloads []TradeScored
		for i := range 10 + rng.IntN(60) {
			broker := []string{"coinbase", "synthetic", "kraken"}[rng.IntN(3)]
			ext := fmt.Sprintf("e%05d", i)
			id := randTradeID(rng, user, broker, ext, i)
			sec := w.Start.Add(-24*time.Hour + time.Duration(rng.IntN(9*24*3600))*time.Second)
			if rng.IntN(4) == 0 {
				sec = sec.Add(time.Duration(rng.IntN(1e9)))
			}
			labels := pick(rng, []string{LabelOvertrading, LabelRevengeTrading, LabelSizeEscalation, "fomo", LabelOvertrading})
			c := TradeScored{TradeFields: TradeFields{TradeID: id, UserID: user, Broker: broker, ExtID: ext, Side: Buy,
				Qty: Exact{randDec(rng)}, Price: Exact{randDec(rng)}, Fee: Exact{randDec(rng)}, TS: sec}, Labels: labels}
			if rng.IntN(2) == 0 {
				c.Side = Sell
				if rng.IntN(5) > 0 {
					c.RealizedPnL = &Fixed8{randDec(rng).Sub(decimal.New(5, 0))}
				}
				for range rng.IntN(4) {
					c.Lots = append(c.Lots, LotPnL{PnL: Fixed8{randDec(rng).Neg()}, Labels: pick(rng, []string{LabelRevengeTrading, "late_night"})})
				}
			}
			payloads = append(payloads, c)
		}
		want := aggJSON(t, Aggregate(w, set(payloads...)))
		for range 4 {
			seq := append([]TradeScored(nil), payloads...)
			for range rng.IntN(len(payloads) + 1) {
				seq = append(seq, payloads[rng.IntN(len(payloads))])
			}
			rng.Shuffle(len(seq), func(i, j int) { seq[i], seq[j] = seq[j], seq[i] })
			// An earlier version of a trade first: the latest replaces it.
			older := payloads[rng.IntN(len(payloads))]
			older.Fee = Exact{older.Fee.Add(decimal.New(7, 0))}
			older.Labels = []string{"stale"}
			seq = append([]TradeScored{older}, seq...)
			if got := aggJSON(t, storeAggregate(t, user, w, seq)); got != want {
				t.Fatalf("round %d:\n got %s\nwant %s", round, got, want)
			}
		}
	}
}

// A window's state survives its encoding, the emitted aggregate's hash, a
// zero last change and a publishing mark included; the encoding is a JSON
// object with the contract's keys revision, emitted_revision and
// last_change (RFC 3339, UTC).
func TestWindowStateEncoding(t *testing.T) {
	cet := time.FixedZone("CET", 3600)
	for _, st := range []WindowState{
		{},
		{Revision: 3, EmittedRevision: 2, LastChange: time.Date(2025, 1, 8, 10, 0, 0, 123, time.UTC),
			EmittedAgg: "00112233445566778899aabbccddeeff", EmittedPartial: true},
		{Revision: 1, EmittedRevision: 1, LastChange: time.Date(2025, 1, 8, 11, 0, 0, 0, cet), Publishing: true,
			PublishMark: time.Date(2026, 11, 26, 10, 0, 0, 5, time.UTC)},
	} {
		raw, err := encodeDigestEntry(digestEntry{Window: &st})
		if err != nil {
			t.Fatal(err)
		}
		var fields map[string]any
		if err := json.Unmarshal(raw, &fields); err != nil {
			t.Fatalf("window state %q is not a JSON object: %v", raw, err)
		}
		for _, k := range []string{"revision", "emitted_revision", "last_change"} {
			if _, ok := fields[k]; !ok {
				t.Errorf("window state %s has no %s", raw, k)
			}
		}
		if fields["revision"] != float64(st.Revision) || fields["emitted_revision"] != float64(st.EmittedRevision) {
			t.Errorf("window state %s: revisions, want %d and %d", raw, st.Revision, st.EmittedRevision)
		}
		lc, _ := fields["last_change"].(string)
		if parsed, err := time.Parse(time.RFC3339Nano, lc); err != nil || !parsed.Equal(st.LastChange) || !strings.HasSuffix(lc, "Z") {
			t.Errorf("window state %s: last_change %q, want %v in RFC 3339 UTC (%v)", raw, lc, st.LastChange, err)
		}
		e, err := decodeDigestEntry(raw)
		if err != nil || e.Window == nil {
			t.Fatalf("decode %s: %v", raw, err)
		}
		want := st
		want.LastChange, want.PublishMark = st.LastChange.UTC(), st.PublishMark.UTC()
		a, _ := json.Marshal(want)
		b, _ := json.Marshal(*e.Window)
		if string(a) != string(b) {
			t.Errorf("window state %s restored as %s", a, b)
		}
	}
}

// randTradeID is TradeID(user, broker, ext) mostly, now and then another
// UUID or a free-text id (trade i's).
func randTradeID(rng *rand.Rand, user, broker, ext string, i int) string {
	switch rng.IntN(6) {
	case 0:
		return uuid.NewString()
	case 1:
		return fmt.Sprintf("trade-%d", i)
	}
	return TradeID(user, broker, ext)
}

func pick(rng *rand.Rand, from []string) []string {
	var out []string
	for _, s := range from {
		if rng.IntN(3) == 0 {
			out = append(out, s)
		}
	}
	return out
}

// randDec is a random decimal, now and then with a coefficient beyond int64.
func randDec(rng *rand.Rand) decimal.Decimal {
	d := decimal.New(rng.Int64N(1e9), -int32(rng.IntN(9)))
	if rng.IntN(10) == 0 {
		d = d.Mul(decimal.New(rng.Int64N(1e12)+1e12, -6)).Mul(decimal.New(1e12, 0))
	}
	return d
}

// A binary window state of the earlier layout (tag 'W') is still read; a
// per-trade JSON value of the layout before it, a window state without a
// contract field, one with a field no window state has and one with a
// negative revision are not.
func TestWindowStateDecodeLayouts(t *testing.T) {
	// encodeWindowState's output before window states were JSON.
	old := "W\x03\x02\a\x10\x00\x11\"3DUfw\x88\x99\xaa\xbb\xcc\xdd\xee\xff\xf6\x81\xb2\x8b\x94\xd3\xd7\x980\x8a\x80\xba\xbb\xd2\xff\xc7\xeb1"
	e, err := decodeDigestEntry([]byte(old))
	if err != nil || e.Window == nil {
		t.Fatalf("binary window state: %v", err)
	}
	want := WindowState{Revision: 3, EmittedRevision: 2, LastChange: time.Date(2025, 1, 8, 10, 0, 0, 123, time.UTC),
		EmittedAgg: "00112233445566778899aabbccddeeff", EmittedPartial: true, Publishing: true,
		PublishMark: time.Date(2026, 11, 26, 10, 0, 0, 5, time.UTC)}
	if *e.Window != want {
		t.Errorf("binary window state decoded as %+v, want %+v", *e.Window, want)
	}
	for _, bad := range []string{
		`{"trade_id":"3aca7316-20fa-5af5-b34a-a0fc8e259e9c","user_id":"u3","broker":"synthetic","ext_id":"2"}`,
		`{"revision":1,"emitted_revision":1}`,
		`{"revision":1,"last_change":"2025-01-08T10:00:00Z"}`,
		`{"revision":1,"emitted_revision":0,"last_change":"2025-01-08T10:00:00Z","colour":"red"}`,
		`{"revision":-1,"emitted_revision":0,"last_change":"2025-01-08T10:00:00Z"}`,
		`{"revision":1,"emitted_revision":0,"last_change":"2025-01-08T10:00:00Z"} {}`,
	} {
		if e, err := decodeDigestEntry([]byte(bad)); err == nil {
			t.Errorf("%s decoded as %+v, want an error", bad, e)
		}
	}
}
