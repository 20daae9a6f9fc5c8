package trades

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// scored builds a contribution by hand; lots are "qty:pnl:label,label".
func scored(ext string, ts time.Time, side Side, qty, price, fee, realized string, labels []string, lots ...LotPnL) TradeScored {
	r := Fixed8{dec(realized)}
	if labels == nil {
		labels = []string{}
	}
	return TradeScored{
		TradeFields: TradeFields{
			TradeID: TradeID("u1", "coinbase", ext), UserID: "u1", Broker: "coinbase", ExtID: ext, Symbol: "BTC", Side: side,
			Qty: Exact{dec(qty)}, Price: Exact{dec(price)}, Fee: Exact{dec(fee)}, TS: ts,
		},
		RealizedPnL: &r,
		Labels:      labels, Lots: lots, LotLabels: []string{},
	}
}

func lot(qty, pnl string, labels ...string) LotPnL {
	if labels == nil {
		labels = []string{}
	}
	return LotPnL{Qty: Exact{dec(qty)}, PnL: Fixed8{dec(pnl)}, Labels: labels}
}

func set(cs ...TradeScored) map[string]TradeScored {
	m := map[string]TradeScored{}
	for _, c := range cs {
		m[c.TradeID] = c
	}
	return m
}

func aggJSON(t *testing.T, a Agg) string {
	t.Helper()
	b, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestAggregateByHand(t *testing.T) {
	w, _ := ParseISOWeek("2025-W02")
	mon := w.Start
	h := func(d int) time.Time { return mon.Add(time.Duration(d) * time.Hour) }
	cs := set(
		scored("b1", h(10), Buy, "2", "100", "1", "0", []string{"size_escalation"}),
		scored("s1", h(11), Sell, "1", "90", "0.5", "-10.5", nil, lot("1", "-10.5", "size_escalation")),
		scored("b2", h(12), Buy, "1", "80", "0", "0", []string{"revenge_trading"}),
		scored("s2", h(13), Sell, "2", "95", "1", "9", []string{"overtrading"},
			lot("1", "-5.5", "overtrading", "size_escalation"), lot("1", "14.5", "overtrading", "revenge_trading")),
		scored("s3", h(30), Sell, "1", "50", "0", "0", nil), // matched nothing
		scored("b3", h(40), Buy, "1", "10", "0", "0", nil),
		scored("s4", h(50), Sell, "1", "12", "0", "2", nil, lot("1", "2")),
		// Outside the window: the week before and the next Monday 00:00.
		scored("old", mon.Add(-time.Nanosecond), Sell, "1", "1", "9", "-9", []string{"overtrading"}, lot("1", "-9", "overtrading")),
		scored("next", w.End, Buy, "1", "1", "0", "0", []string{"overtrading"}),
	)
	want := `{"trades":7,"buys":3,"sells":4,"notional":"632.00000000","fees":"2.50000000","realized_pnl":"0.50000000",` +
		`"counts_by_label":{"overtrading":1,"revenge_trading":1,"size_escalation":1},` +
		`"pnl_by_label":{"overtrading":"9.00000000","revenge_trading":"14.50000000","size_escalation":"-16.00000000","unlabelled":"2.00000000"},` +
		`"biased_trade_share":0.4286,"streaks":{"longest_win":2,"longest_loss":1},` +
		`"top_insight":{"label":"size_escalation","pnl":"-16.00000000"}}`
	if got := aggJSON(t, Aggregate(w, cs)); got != want {
		t.Errorf("aggregate\n got %s\nwant %s", got, want)
	}
}

func TestAggregateEmptyWindow(t *testing.T) {
	w, _ := ParseISOWeek("2025-W02")
	want := `{"trades":0,"buys":0,"sells":0,"notional":"0.00000000","fees":"0.00000000","realized_pnl":"0.00000000",` +
		`"counts_by_label":{},"pnl_by_label":{},"biased_trade_share":0,"streaks":{"longest_win":0,"longest_loss":0},"top_insight":null}`
	if got := aggJSON(t, Aggregate(w, nil)); got != want {
		t.Errorf("empty aggregate\n got %s\nwant %s", got, want)
	}
}

func TestAggregateStreaks(t *testing.T) {
	w, _ := ParseISOWeek("2025-W02")
	var cs []TradeScored
	// W W 0 W L L 0 L W: zeros neither extend nor break a run.
	for i, r := range []string{"1", "2", "0", "0.00000001", "-1", "-1", "0", "-3", "4"} {
		cs = append(cs, scored(fmt.Sprintf("s%d", i), w.Start.Add(time.Duration(i)*time.Hour), Sell, "1", "1", "0", r, nil))
	}
	// A BUY between does not break a run either.
	cs = append(cs, scored("b", w.Start.Add(90*time.Minute), Buy, "1", "1", "0", "0", nil))
	a := Aggregate(w, set(cs...))
	if a.Streaks != (Streaks{LongestWin: 3, LongestLoss: 3}) {
		t.Errorf("streaks %+v, want 3 and 3", a.Streaks)
	}
	// Same ts: (broker, ext_id) order decides.
	same := set(
		scored("a", w.Start, Sell, "1", "1", "0", "1", nil),
		scored("b", w.Start, Sell, "1", "1", "0", "-1", nil),
		scored("c", w.Start, Sell, "1", "1", "0", "1", nil),
	)
	if s := Aggregate(w, same).Streaks; s != (Streaks{LongestWin: 1, LongestLoss: 1}) {
		t.Errorf("same-ts streaks %+v, want 1 and 1 (a, b, c in ext_id order)", s)
	}
}

func TestTopInsightTies(t *testing.T) {
	w, _ := ParseISOWeek("2025-W02")
	at := func(i int) time.Time { return w.Start.Add(time.Duration(i) * time.Hour) }
	cases := []struct {
		name string
		cs   map[string]TradeScored
		want string
	}{
		{"most negative wins", set(
			scored("s1", at(1), Sell, "1", "1", "0", "-5", nil, lot("1", "-5", "alpha")),
			scored("s2", at(2), Sell, "1", "1", "0", "-6", nil, lot("1", "-6", "beta")),
		), `{"label":"beta","pnl":"-6.00000000"}`},
		{"tie: the larger count", set(
			scored("s1", at(1), Sell, "1", "1", "0", "-5", nil, lot("1", "-5", "alpha")),
			scored("s2", at(2), Sell, "1", "1", "0", "-5", []string{"beta"}, lot("1", "-5", "beta")),
		), `{"label":"beta","pnl":"-5.00000000"}`},
		{"tie and equal counts: the name", set(
			scored("s1", at(1), Sell, "1", "1", "0", "-5", nil, lot("1", "-5", "beta")),
			scored("s2", at(2), Sell, "1", "1", "0", "-5", nil, lot("1", "-5", "alpha")),
		), `{"label":"alpha","pnl":"-5.00000000"}`},
		{"no negative label", set(
			scored("s1", at(1), Sell, "1", "1", "0", "5", nil, lot("1", "5", "alpha")),
			scored("s2", at(2), Sell, "1", "1", "0", "0", nil, lot("1", "0", "beta")),
		), `null`},
		{"unlabelled is not a label", set(
			scored("s1", at(1), Sell, "1", "1", "0", "-5", nil, lot("1", "-5")),
		), `null`},
	}
	for _, c := range cases {
		b, _ := json.Marshal(Aggregate(w, c.cs).TopInsight)
		if string(b) != c.want {
			t.Errorf("%s: top_insight %s, want %s", c.name, b, c.want)
		}
	}
}

// Any permutation and any duplication of the same scored trades, stored
// by trade id as the digest store does, gives the same digest.
func TestAggregateIgnoresOrderAndDuplicates(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	w, _ := ParseISOWeek("2025-W02")
	for round := range 50 {
		var hist []Trade
		for i := range 20 + rng.IntN(60) {
			side := []Side{Buy, Buy, Sell}[rng.IntN(3)]
			ts := w.Start.Add(-2*24*time.Hour + time.Duration(rng.IntN(11*24*60))*time.Minute)
			hist = append(hist, Trade{
				ID: TradeID("u1", "coinbase", fmt.Sprint(i)), UserID: "u1", Broker: "coinbase", ExtID: fmt.Sprint(i),
				Symbol: []string{"BTC", "ETH"}[rng.IntN(2)], Side: side,
				Qty: dec(fmt.Sprintf("%d.%03d", rng.IntN(5), 1+rng.IntN(999))), Price: dec(fmt.Sprintf("%d.%02d", 50+rng.IntN(100), rng.IntN(100))),
				Fee: dec(fmt.Sprintf("0.%04d", rng.IntN(10000))), TS: ts,
			})
		}
		// As the store holds them: trade.scored payloads read back from JSON.
		var payloads []TradeScored
		for _, s := range Score(hist, time.Time{}) {
			b, _ := json.Marshal(s.Payload())
			p, err := DecodeTradeScored(b)
			if err != nil {
				t.Fatal(err)
			}
			payloads = append(payloads, p)
		}
		want := aggJSON(t, Aggregate(w, set(payloads...)))
		for range 5 {
			seq := append([]TradeScored(nil), payloads...)
			for range rng.IntN(len(payloads) + 1) {
				seq = append(seq, payloads[rng.IntN(len(payloads))])
			}
			rng.Shuffle(len(seq), func(i, j int) { seq[i], seq[j] = seq[j], seq[i] })
			if got := aggJSON(t, Aggregate(w, set(seq...))); got != want {
				t.Fatalf("round %d: permuted and duplicated\n got %s\nwant %s", round, got, want)
			}
		}
	}
}
