package trades

import (
	"github.com/shopspring/decimal"
)

// Ledger matches SELLs against open BUY lots first in, first out, per
// (user, symbol), and computes realized P/L exactly. Apply trades in the
// user's history order, (ts, broker, ext_id) (SortHistory). A Ledger is
// not safe for concurrent use; the zero value is not usable, use NewLedger.
type Ledger struct {
	open map[ledgerKey][]openLot
}

type ledgerKey struct{ user, symbol string }

type openLot struct {
	buyIdx int // index of the opening BUY in the caller's sequence
	qty    decimal.Decimal
	price  decimal.Decimal
}

// Match is the part of one opening BUY that a SELL closed.
type Match struct {
	BuyIdx int             // the BUY's index in the sequence given to Apply
	Qty    decimal.Decimal // quantity closed, > 0
	// PnL is (sell price − buy price) × Qty minus this lot's share of the
	// SELL's fee (splitFee).
	PnL decimal.Decimal
}

// Fill is what Apply found for one trade.
type Fill struct {
	// Realized is a SELL's realized P/L: Σ (sell price − lot price) ×
	// matched quantity over its matched lots, minus the SELL's whole fee.
	// Quantity sold beyond the open lots matches nothing and realizes 0
	// (no short positions). BUY fees are not attributed. 0 for a BUY.
	Realized decimal.Decimal
	// Lots are a SELL's matched lots, oldest first; their PnL sum to
	// Realized exactly when there is at least one.
	Lots []Match
}

// NewLedger returns an empty ledger.
func NewLedger() *Ledger { return &Ledger{open: map[ledgerKey][]openLot{}} }

// Apply books trade t, the idx-th of the caller's sequence: a BUY opens a
// lot, a SELL closes open lots of its (user, symbol) oldest first.
func (l *Ledger) Apply(idx int, t Trade) Fill {
	k := ledgerKey{t.UserID, t.Symbol}
	if t.Side == Buy {
		l.open[k] = append(l.open[k], openLot{buyIdx: idx, qty: t.Qty, price: t.Price})
		return Fill{Realized: decimal.Zero}
	}
	lots := l.open[k]
	remaining := t.Qty
	var matches []Match
	gross := decimal.Zero
	for len(lots) > 0 && remaining.Sign() > 0 {
		q := decimal.Min(remaining, lots[0].qty)
		pnl := t.Price.Sub(lots[0].price).Mul(q)
		matches = append(matches, Match{BuyIdx: lots[0].buyIdx, Qty: q, PnL: pnl})
		gross = gross.Add(pnl)
		remaining = remaining.Sub(q)
		if lots[0].qty.Equal(q) {
			lots = lots[1:]
		} else {
			lots[0].qty = lots[0].qty.Sub(q)
		}
	}
	l.open[k] = lots
	for i, share := range splitFee(t.Fee, matches) {
		matches[i].PnL = matches[i].PnL.Sub(share)
	}
	return Fill{Realized: gross.Sub(t.Fee), Lots: matches}
}

// splitFee splits fee over the matched lots pro rata by quantity: every
// lot but the last gets fee × qty / Σ qty rounded half-even to PnLPlaces
// digits, the last gets the rest, so the shares sum to fee exactly.
func splitFee(fee decimal.Decimal, lots []Match) []decimal.Decimal {
	if len(lots) == 0 {
		return nil
	}
	total := decimal.Zero
	for _, m := range lots {
		total = total.Add(m.Qty)
	}
	shares := make([]decimal.Decimal, len(lots))
	rest := fee
	for i, m := range lots[:len(lots)-1] {
		shares[i] = divHalfEven(fee.Mul(m.Qty), total, PnLPlaces)
		rest = rest.Sub(shares[i])
	}
	shares[len(lots)-1] = rest
	return shares
}

// divHalfEven returns n / d rounded half-even to places fractional
// digits, for n >= 0 and d > 0.
func divHalfEven(n, d decimal.Decimal, places int32) decimal.Decimal {
	q, r := n.QuoRem(d, places)
	ulp := decimal.New(1, -places)
	switch r.Mul(decimal.NewFromInt(2)).Cmp(d.Mul(ulp)) {
	case 1:
		return q.Add(ulp)
	case 0:
		if q.Shift(places).BigInt().Bit(0) == 1 {
			return q.Add(ulp)
		}
	}
	return q
}
