package trades

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"
)

var t0 = time.Date(2025, 1, 6, 9, 0, 0, 0, time.UTC)

// at builds a trade of u1 at t0+d; ext orders trades of the same ts.
func at(d time.Duration, ext string, side Side, qty, price, fee string) Trade {
	return Trade{
		ID: TradeID("u1", "coinbase", ext), UserID: "u1", Broker: "coinbase", ExtID: ext, Symbol: "BTC", Side: side,
		Qty: dec(qty), Price: dec(price), Fee: dec(fee), TS: t0.Add(d),
	}
}

// labelsByExt scores history since the zero time and returns each trade's
// labels as name:confidence.
func labelsByExt(history []Trade) map[string][]string {
	out := map[string][]string{}
	for _, s := range Score(history, time.Time{}) {
		var ls []string
		for _, l := range s.Labels {
			ls = append(ls, fmt.Sprintf("%s:%g", l.Name, l.Confidence))
		}
		out[s.Trade.ExtID] = ls
	}
	return out
}

func has(labels []string, name string) bool {
	for _, l := range labels {
		if len(l) > len(name) && l[:len(name)+1] == name+":" {
			return true
		}
	}
	return false
}

func TestOvertrading(t *testing.T) {
	// 10 trades a minute apart: the 10th is the first with n = 10.
	var h []Trade
	for i := range 10 {
		h = append(h, at(time.Duration(i)*time.Minute, fmt.Sprintf("a%02d", i), Buy, "1", "1", "0"))
	}
	got := labelsByExt(h)
	if has(got["a08"], LabelOvertrading) {
		t.Errorf("n = 9 labelled: %v", got["a08"])
	}
	if !slices.Contains(got["a09"], "overtrading:0.5") {
		t.Errorf("n = 10: %v, want overtrading:0.5", got["a09"])
	}

	// The window is (ts − 60 min, ts]: a trade exactly 60 minutes earlier
	// is out, one a second later is in.
	var out, in []Trade
	out = append(out, at(0, "b00", Buy, "1", "1", "0"))
	in = append(in, at(time.Second, "b00", Buy, "1", "1", "0"))
	for i := 1; i <= 9; i++ {
		x := at(60*time.Minute, fmt.Sprintf("b%02d", i), Buy, "1", "1", "0")
		out, in = append(out, x), append(in, x)
	}
	if l := labelsByExt(out)["b09"]; has(l, LabelOvertrading) {
		t.Errorf("trade at ts − 60 min counted: %v", l)
	}
	if l := labelsByExt(in)["b09"]; !slices.Contains(l, "overtrading:0.5") {
		t.Errorf("trade at ts − 59:59 not counted: %v", l)
	}

	// Same ts: only the trades up to this one in (ts, broker, ext_id)
	// order count; confidence min(1, n/20).
	var same []Trade
	for i := range 25 {
		same = append(same, at(0, fmt.Sprintf("c%02d", i), Sell, "1", "1", "0"))
	}
	got = labelsByExt(same)
	for ext, want := range map[string]string{"c08": "", "c09": "overtrading:0.5", "c14": "overtrading:0.75", "c19": "overtrading:1", "c24": "overtrading:1"} {
		if (want == "" && has(got[ext], LabelOvertrading)) || (want != "" && !slices.Contains(got[ext], want)) {
			t.Errorf("%s: %v, want %q", ext, got[ext], want)
		}
	}
}

func TestRevengeTrading(t *testing.T) {
	base := func(sellPrice string, gap time.Duration, between bool, side Side) []Trade {
		h := []Trade{
			at(0, "r1", Buy, "1", "100", "0"),
			at(time.Hour, "r2", Sell, "1", sellPrice, "0"),
		}
		if between {
			h = append(h, at(time.Hour+time.Second, "r3", Buy, "1", "1", "0"))
		}
		return append(h, at(time.Hour+gap, "r4", side, "1", "1", "0"))
	}
	cases := []struct {
		name string
		h    []Trade
		want bool
	}{
		{"loss, 30 min later", base("90", 30*time.Minute, false, Buy), true},
		{"loss, 30 min 1 s later", base("90", 30*time.Minute+time.Second, false, Buy), false},
		{"loss, at once", base("90", 0, false, Buy), true},
		{"break-even", base("100", time.Minute, false, Buy), false},
		{"gain", base("110", time.Minute, false, Buy), false},
		{"not the first trade after the SELL", base("90", 2*time.Second, true, Buy), false},
		{"a SELL after the loss", base("90", time.Minute, false, Sell), false},
		// A SELL with nothing to close loses its fee.
		{"loss of the fee alone", []Trade{at(0, "r2", Sell, "1", "1", "0.01"), at(time.Minute, "r4", Buy, "1", "1", "0")}, true},
	}
	for _, c := range cases {
		l := labelsByExt(c.h)["r4"]
		if got := slices.Contains(l, "revenge_trading:0.8"); got != c.want {
			t.Errorf("%s: labels %v, want revenge_trading %t", c.name, l, c.want)
		}
	}
}

func TestSizeEscalation(t *testing.T) {
	hist := func(notionals ...string) []Trade {
		var h []Trade
		for i, n := range notionals {
			h = append(h, at(time.Duration(i)*2*time.Hour, fmt.Sprintf("s%02d", i), Sell, "1", n, "0"))
		}
		return h
	}
	withLast := func(h []Trade, side Side, price string) []Trade {
		return append(h, at(time.Duration(len(h))*2*time.Hour, "last", side, "2", price, "0"))
	}
	cases := []struct {
		name string
		h    []Trade
		want bool
	}{
		{"5 previous, exactly 2 × mean", withLast(hist("100", "100", "100", "50", "150"), Buy, "100"), true},
		{"5 previous, just under", withLast(hist("100", "100", "100", "50", "150"), Buy, "99.99999999"), false},
		{"4 previous", withLast(hist("100", "100", "100", "100"), Buy, "1000"), false},
		{"a SELL", withLast(hist("100", "100", "100", "100", "100"), Sell, "1000"), false},
		// Only the previous 10 count: the two large ones are older.
		{"12 previous", withLast(hist("9999", "9999", "100", "100", "100", "100", "100", "100", "100", "100", "100", "100"), Buy, "100"), true},
		{"11 previous, the large one within 10", withLast(hist("1", "9999", "100", "100", "100", "100", "100", "100", "100", "100", "100"), Buy, "100"), false},
	}
	for _, c := range cases {
		l := labelsByExt(c.h)["last"]
		if got := slices.Contains(l, "size_escalation:0.7"); got != c.want {
			t.Errorf("%s: labels %v, want size_escalation %t", c.name, l, c.want)
		}
	}
}

func TestScoreSinceAndLotLabels(t *testing.T) {
	// Five small trades, then a large BUY (size escalation) before since;
	// a SELL after since closes it.
	var h []Trade
	for i := range 5 {
		h = append(h, at(time.Duration(i)*2*time.Hour, fmt.Sprintf("p%d", i), Sell, "1", "1", "0"))
	}
	h = append(h, at(10*time.Hour, "big", Buy, "10", "100", "0"))
	h = append(h, at(30*time.Hour, "close", Sell, "4", "90", "2"))
	since := t0.Add(24 * time.Hour)
	scored := Score(h, since)
	if len(scored) != 1 || scored[0].Trade.ExtID != "close" {
		t.Fatalf("scored %+v, want only the SELL after since", scored)
	}
	p := scored[0].Payload()
	if len(p.Labels) != 0 || !slices.Equal(p.LotLabels, []string{LabelSizeEscalation}) {
		t.Errorf("labels %v lot_labels %v", p.Labels, p.LotLabels)
	}
	if len(p.Lots) != 1 || !slices.Equal(p.Lots[0].Labels, []string{LabelSizeEscalation}) ||
		p.Lots[0].PnL.String() != "-42" || p.RealizedPnL.String() != "-42" || p.Lots[0].Qty.String() != "4" {
		t.Errorf("lots %+v realized %s", p.Lots, p.RealizedPnL)
	}
	if scored[0].Lots[0].BuyTradeID != TradeID("u1", "coinbase", "big") {
		t.Errorf("lot opened by %s", scored[0].Lots[0].BuyTradeID)
	}
}

// The lot of a labelled BUY closed by a labelled SELL carries the union.
func TestLotLabelsUnion(t *testing.T) {
	h := []Trade{
		at(0, "a", Buy, "1", "100", "0"),
		at(time.Minute, "b", Sell, "1", "90", "0"),  // loss
		at(2*time.Minute, "c", Buy, "1", "95", "0"), // revenge
	}
	for i := range 9 { // the 10th trade within the hour is the closing SELL
		h = append(h, at(3*time.Minute+time.Duration(i)*time.Second, fmt.Sprintf("d%d", i), Buy, "0.001", "1", "0"))
	}
	h = append(h, at(20*time.Minute, "e", Sell, "1", "97", "0")) // closes c (a is closed)
	scored := Score(h, time.Time{})
	last := scored[len(scored)-1]
	if !slices.Equal(last.LabelNames(), []string{LabelOvertrading}) {
		t.Fatalf("closing SELL labels %v", last.LabelNames())
	}
	if lot := last.Lots[0]; lot.BuyTradeID != TradeID("u1", "coinbase", "c") ||
		!slices.Equal(lot.Labels, []string{LabelOvertrading, LabelRevengeTrading}) {
		t.Errorf("first lot %+v, want c's revenge_trading with the SELL's overtrading", lot)
	}
	if p := last.Payload(); !slices.Equal(p.LotLabels, []string{LabelRevengeTrading}) {
		t.Errorf("lot_labels %v, want the opening BUY's", p.LotLabels)
	}
}

func TestScoreIgnoresInputOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	var h []Trade
	for i := range 60 {
		side := []Side{Buy, Sell}[rng.IntN(2)]
		h = append(h, at(time.Duration(rng.IntN(180))*time.Minute, fmt.Sprintf("z%02d", i), side,
			fmt.Sprint(1+rng.IntN(5)), fmt.Sprint(90+rng.IntN(20)), "0.1"))
	}
	want := Score(h, t0.Add(time.Hour))
	for range 5 {
		rng.Shuffle(len(h), func(i, j int) { h[i], h[j] = h[j], h[i] })
		if got := Score(h, t0.Add(time.Hour)); !reflect.DeepEqual(got, want) {
			t.Fatal("a shuffled history scored differently")
		}
	}
}
