package trades

import (
	"fmt"
	"math/big"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/shopspring/decimal"
)

func dec(s string) decimal.Decimal { return decimal.RequireFromString(s) }

// tr builds a trade of user u1; i orders it (ts = base + i minutes).
func tr(i int, symbol string, side Side, qty, price, fee string) Trade {
	ext := fmt.Sprintf("x%04d", i)
	return Trade{
		ID: TradeID("u1", "coinbase", ext), UserID: "u1", Broker: "coinbase", ExtID: ext, Symbol: symbol, Side: side,
		Qty: dec(qty), Price: dec(price), Fee: dec(fee), TS: time.Date(2025, 1, 6, 9, 0, 0, 0, time.UTC).Add(time.Duration(i) * time.Minute),
	}
}

type wantLot struct {
	buyIdx   int
	qty, pnl string
}

func TestLedgerFIFO(t *testing.T) {
	cases := []struct {
		name     string
		trades   []Trade
		realized string // of the last trade
		lots     []wantLot
	}{
		{
			name: "two lots, fee split by quantity",
			trades: []Trade{
				tr(0, "BTC", Buy, "1", "100", "1"), // buy fees are not attributed
				tr(1, "BTC", Buy, "3", "110", "0"),
				tr(2, "BTC", Sell, "2", "120", "0.3"),
			},
			realized: "29.7", // 20 + 10 − 0.3
			lots:     []wantLot{{0, "1", "19.85"}, {1, "1", "9.85"}},
		},
		{
			name: "the rest of a partly closed lot comes first",
			trades: []Trade{
				tr(0, "BTC", Buy, "1", "100", "0"),
				tr(1, "BTC", Buy, "3", "110", "0"),
				tr(2, "BTC", Sell, "2", "120", "0"),
				tr(3, "BTC", Sell, "2", "105", "0.2"),
			},
			realized: "-10.2", // 2 × (105 − 110) − 0.2
			lots:     []wantLot{{1, "2", "-10.2"}},
		},
		{
			name: "unmatched quantity realizes nothing but the fee is whole",
			trades: []Trade{
				tr(0, "BTC", Buy, "1", "100", "0"),
				tr(1, "BTC", Sell, "3", "90", "1"),
			},
			realized: "-11",
			lots:     []wantLot{{0, "1", "-11"}},
		},
		{
			name:     "a SELL without open lots",
			trades:   []Trade{tr(0, "BTC", Sell, "1", "90", "0.5")},
			realized: "-0.5",
		},
		{
			name: "symbols are separate",
			trades: []Trade{
				tr(0, "BTC", Buy, "1", "100", "0"),
				tr(1, "ETH", Buy, "1", "10", "0"),
				tr(2, "ETH", Sell, "1", "12", "0"),
			},
			realized: "2",
			lots:     []wantLot{{1, "1", "2"}},
		},
		{
			name: "a fee tie rounds half-even: 0.000000015 to 0.00000002",
			trades: []Trade{
				tr(0, "BTC", Buy, "1", "1", "0"),
				tr(1, "BTC", Buy, "1", "1", "0"),
				tr(2, "BTC", Sell, "2", "1", "0.00000003"),
			},
			realized: "-0.00000003",
			lots:     []wantLot{{0, "1", "-0.00000002"}, {1, "1", "-0.00000001"}},
		},
		{
			name: "a fee tie rounds half-even: 0.000000005 to 0",
			trades: []Trade{
				tr(0, "BTC", Buy, "1", "1", "0"),
				tr(1, "BTC", Buy, "1", "1", "0"),
				tr(2, "BTC", Sell, "2", "1", "0.00000001"),
			},
			realized: "-0.00000001",
			lots:     []wantLot{{0, "1", "0"}, {1, "1", "-0.00000001"}},
		},
		{
			name: "shares of a third: the last lot takes the rest",
			trades: []Trade{
				tr(0, "BTC", Buy, "1", "1", "0"),
				tr(1, "BTC", Buy, "1", "1", "0"),
				tr(2, "BTC", Buy, "1", "1", "0"),
				tr(3, "BTC", Sell, "3", "1", "1"),
			},
			realized: "-1",
			lots:     []wantLot{{0, "1", "-0.33333333"}, {1, "1", "-0.33333333"}, {2, "1", "-0.33333334"}},
		},
	}
	for _, c := range cases {
		l := NewLedger()
		var f Fill
		for i, x := range c.trades {
			f = l.Apply(i, x)
		}
		if !f.Realized.Equal(dec(c.realized)) {
			t.Errorf("%s: realized %s, want %s", c.name, f.Realized, c.realized)
		}
		if len(f.Lots) != len(c.lots) {
			t.Errorf("%s: lots %+v, want %+v", c.name, f.Lots, c.lots)
			continue
		}
		for i, w := range c.lots {
			g := f.Lots[i]
			if g.BuyIdx != w.buyIdx || !g.Qty.Equal(dec(w.qty)) || !g.PnL.Equal(dec(w.pnl)) {
				t.Errorf("%s: lot %d = {%d %s %s}, want %+v", c.name, i, g.BuyIdx, g.Qty, g.PnL, w)
			}
		}
	}
}

// refLedger is the reference: quantities are whole numbers of units of
// 0.01; every bought unit is queued with its price, a SELL pops units one
// by one. Exact rational arithmetic.
type refLedger struct {
	units map[string][]refUnit
}

type refUnit struct {
	buyIdx int
	price  *big.Rat
}

type refLot struct {
	buyIdx int
	units  int64
	gross  *big.Rat
}

var unit = big.NewRat(1, 100)

func (r *refLedger) apply(idx int, side Side, symbol string, units int64, price, fee *big.Rat) (*big.Rat, []refLot) {
	if side == Buy {
		for range units {
			r.units[symbol] = append(r.units[symbol], refUnit{idx, price})
		}
		return new(big.Rat), nil
	}
	var lots []refLot
	total := new(big.Rat)
	for ; units > 0 && len(r.units[symbol]) > 0; units-- {
		u := r.units[symbol][0]
		r.units[symbol] = r.units[symbol][1:]
		g := new(big.Rat).Mul(new(big.Rat).Sub(price, u.price), unit)
		total.Add(total, g)
		if len(lots) == 0 || lots[len(lots)-1].buyIdx != u.buyIdx {
			lots = append(lots, refLot{buyIdx: u.buyIdx, gross: new(big.Rat)})
		}
		lots[len(lots)-1].units++
		lots[len(lots)-1].gross.Add(lots[len(lots)-1].gross, g)
	}
	return total.Sub(total, fee), lots
}

func rat(d decimal.Decimal) *big.Rat { return d.Rat() }

func TestLedgerMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 2))
	halfUlp := big.NewRat(1, 2e8)
	for seq := range 300 {
		l := NewLedger()
		ref := &refLedger{units: map[string][]refUnit{}}
		n := 1 + rng.IntN(40)
		for i := range n {
			side := Buy
			if rng.IntN(5) < 2 {
				side = Sell
			}
			symbol := []string{"BTC", "ETH"}[rng.IntN(2)]
			units := int64(1 + rng.IntN(500))
			price := decimal.New(int64(1+rng.IntN(100000)), -2)
			fee := decimal.New(int64(rng.IntN(2000)), -3)
			x := Trade{UserID: "u1", Symbol: symbol, Side: side, Qty: decimal.New(units, -2), Price: price, Fee: fee}
			if side == Buy && rng.IntN(3) == 0 {
				x.Fee = decimal.Zero
			}
			got := l.Apply(i, x)
			wantRealized, wantLots := ref.apply(i, side, symbol, units, rat(price), rat(x.Fee))
			where := fmt.Sprintf("sequence %d trade %d (%s %s %s@%s fee %s)", seq, i, side, symbol, x.Qty, price, x.Fee)
			if rat(got.Realized).Cmp(wantRealized) != 0 {
				t.Fatalf("%s: realized %s, want %s", where, got.Realized, wantRealized.FloatString(10))
			}
			if len(got.Lots) != len(wantLots) {
				t.Fatalf("%s: %d lots, want %d", where, len(got.Lots), len(wantLots))
			}
			if side == Buy {
				continue
			}
			sumPnL, sumShares, totalQty := new(big.Rat), new(big.Rat), new(big.Rat)
			for _, w := range wantLots {
				totalQty.Add(totalQty, new(big.Rat).Mul(big.NewRat(w.units, 1), unit))
			}
			for k, g := range got.Lots {
				w := wantLots[k]
				if g.BuyIdx != w.buyIdx || rat(g.Qty).Cmp(new(big.Rat).Mul(big.NewRat(w.units, 1), unit)) != 0 {
					t.Fatalf("%s: lot %d = %d×%s, want %d×%d units", where, k, g.BuyIdx, g.Qty, w.buyIdx, w.units)
				}
				share := new(big.Rat).Sub(w.gross, rat(g.PnL))
				sumPnL.Add(sumPnL, rat(g.PnL))
				sumShares.Add(sumShares, share)
				if k == len(got.Lots)-1 {
					continue
				}
				// fee × qty / Σ qty, to the nearest 1e-8.
				exact := new(big.Rat).Quo(new(big.Rat).Mul(rat(x.Fee), rat(g.Qty)), totalQty)
				if d := new(big.Rat).Sub(share, exact); d.Abs(d).Cmp(halfUlp) > 0 {
					t.Fatalf("%s: lot %d fee share %s, exact %s", where, k, share.FloatString(12), exact.FloatString(12))
				}
			}
			if len(got.Lots) > 0 && (sumPnL.Cmp(wantRealized) != 0 || sumShares.Cmp(rat(x.Fee)) != 0) {
				t.Fatalf("%s: lots sum to %s with fee shares %s, want %s and %s", where,
					sumPnL.FloatString(10), sumShares.FloatString(10), wantRealized.FloatString(10), x.Fee)
			}
		}
	}
}
