package trades

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/shopspring/decimal"
)

// randContribs is a random window's contributions of user: derived,
// UUID and free-text trade ids, known and other brokers and labels,
// sub-second and equal timestamps, coefficients beyond int64, SELLs with
// lots.
func randContribs(rng *rand.Rand, user string, w Window) windowContribs {
	m := windowContribs{}
	for i := range rng.IntN(90) {
		broker := []string{"synthetic", "coinbase", "kraken"}[rng.IntN(3)]
		ext := fmt.Sprintf("x%04d", i*(1+rng.IntN(3)))
		if rng.IntN(10) == 0 {
			ext = fmt.Sprintf("y%d", rng.IntN(1e6))
		}
		id := randTradeID(rng, user, broker, ext, i)
		ts := w.Start.Add(time.Duration(rng.IntN(7*24*3600)) * time.Second)
		if rng.IntN(5) == 0 {
			ts = ts.Add(time.Duration(rng.IntN(1e9)))
		}
		c := TradeScored{TradeFields: TradeFields{TradeID: id, UserID: user, Broker: broker, ExtID: ext, Side: Buy,
			Qty: Exact{randDec(rng)}, Price: Exact{randDec(rng)}, Fee: Exact{randDec(rng)}, TS: ts},
			Labels: pick(rng, []string{LabelOvertrading, LabelRevengeTrading, LabelSizeEscalation, "fomo"})}
		if rng.IntN(2) == 0 {
			c.Side = Sell
			c.RealizedPnL = &Fixed8{randDec(rng).Sub(decimal.New(5, 0))}
			for range rng.IntN(4) {
				c.Lots = append(c.Lots, LotPnL{PnL: Fixed8{randDec(rng).Neg()}, Labels: pick(rng, []string{LabelRevengeTrading, "late_night"})})
			}
		}
		key, enc := encodeContrib(user, contribOf(c))
		m[key] = enc
	}
	return m
}

// A contribution set written in the sorted layout ('D') reads back as
// exactly the same set: every key with its encoding byte for byte (the
// stage compares a redelivered trade's encoding with the restored one). A
// set of the first layout ('C') still reads the same.
func TestContribsLayoutsRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	w, _ := ParseISOWeek("2025-W02")
	for round := range 300 {
		user := fmt.Sprintf("u%d", round)
		m := randContribs(rng, user, w)
		for _, layout := range []struct {
			name string
			tag  byte
			enc  func(string, windowContribs) []byte
		}{{"sorted", tagContribsSorted, encodeContribs}, {"keyed", tagContribs, encodeContribsKeyed}} {
			raw := layout.enc(user, m)
			if raw[0] != layout.tag {
				t.Fatalf("%s layout tagged %q, want %q", layout.name, raw[0], layout.tag)
			}
			e, err := decodeDigestEntry(raw)
			if err != nil {
				t.Fatalf("round %d %s: %v", round, layout.name, err)
			}
			if e.User != user || !maps.Equal(e.Contribs, m) {
				t.Fatalf("round %d %s: read %d contributions of %q, want the %d of %q byte for byte", round, layout.name, len(e.Contribs), e.User, len(m), user)
			}
		}
	}
}

// A truncated or extended sorted set is an error, never a panic or a
// different set.
func TestContribsSortedCorrupt(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	w, _ := ParseISOWeek("2025-W02")
	var m windowContribs
	for len(m) < 5 {
		m = randContribs(rng, "u1", w)
	}
	raw := encodeContribs("u1", m)
	for n := 1; n < len(raw); n++ {
		if _, err := decodeDigestEntry(raw[:n]); err == nil {
			t.Fatalf("the first %d of %d bytes decoded", n, len(raw))
		}
	}
	if _, err := decodeDigestEntry(append(raw, 0)); err == nil {
		t.Fatal("a byte after the set decoded")
	}
}

// A set holding an encoding the sorted layout cannot cut (none that
// encodeContrib writes) is written in the keyed layout, and reads back.
func TestContribsUnsortableFallsBack(t *testing.T) {
	m := windowContribs{"\x01t1": "\x00\x05"}
	raw := encodeContribs("u1", m)
	if raw[0] != tagContribs {
		t.Fatalf("tag %q, want %q", raw[0], tagContribs)
	}
	if _, _, err := decodeContribs(string(raw)); err == nil {
		t.Fatal("an invalid encoding decoded") // decodeContrib refuses it, as before
	}
}

// On a corpus shaped like bench-trades' the sorted layout is smaller than
// the keyed one.
func TestContribsSortedIsSmaller(t *testing.T) {
	var sorted, keyed int
	for k, m := range benchWindows(t, 5) {
		user, _, _ := splitStateKey(k, "C|")
		sorted += len(encodeContribs(user, m))
		keyed += len(encodeContribsKeyed(user, m))
	}
	if sorted >= keyed*9/10 {
		t.Fatalf("sorted layout %d bytes, keyed %d: not 10 %% smaller", sorted, keyed)
	}
	t.Logf("sorted %d bytes, keyed %d (%.2f)", sorted, keyed, float64(sorted)/float64(keyed))
}
