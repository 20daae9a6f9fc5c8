package trades

import (
	"cmp"
	"slices"
	"time"

	"github.com/shopspring/decimal"
)

// Labels of rules version 1 (static thresholds).
const (
	LabelOvertrading    = "overtrading"
	LabelRevengeTrading = "revenge_trading"
	LabelSizeEscalation = "size_escalation"
	// LabelNone is not a label: it is what the digest attributes the P/L
	// of lots without labels to (pnl_by_label's "unlabelled").
	LabelNone = "unlabelled"
)

// RulesVersion is the bias_tags.rules_version of the labels below.
const RulesVersion = 1

// Thresholds of the v1 labels.
const (
	// A trade is overtrading when OvertradingMin or more of the user's
	// trades, itself included, are in (ts − OvertradingWindow, ts] up to it
	// in history order; confidence min(1, n/OvertradingFull).
	OvertradingWindow = 60 * time.Minute
	OvertradingMin    = 10
	OvertradingFull   = 20
	// A BUY is revenge trading when the user's trade just before it is a
	// SELL with realized P/L < 0 at most RevengeWindow earlier.
	RevengeWindow     = 30 * time.Minute
	RevengeConfidence = 0.8
	// A BUY is size escalation when its notional is at least
	// SizeEscalationFactor × the mean notional of the user's previous
	// SizeLookback trades (all of them when fewer, if SizeMinHistory or
	// more exist).
	SizeEscalationFactor     = 2
	SizeLookback             = 10
	SizeMinHistory           = 5
	SizeEscalationConfidence = 0.7
)

// Label is a bias label of a trade: its name, confidence in [0, 1] and the
// features that decided it (bias_tags.features).
type Label struct {
	Name       string
	Confidence float64
	Features   map[string]any
}

// Scored is a trade with its realized P/L, matched lots and labels.
type Scored struct {
	Trade    Trade
	Realized decimal.Decimal // 0 for a BUY
	Lots     []ScoredLot     // a SELL's matched lots, oldest first
	Labels   []Label         // sorted by name
}

// ScoredLot is a matched lot of a SELL: the opening BUY, the quantity
// closed, its P/L after its share of the SELL's fee, the BUY's label names
// and Labels, the sorted union of the BUY's and the SELL's label names.
type ScoredLot struct {
	BuyTradeID string
	Qty        decimal.Decimal
	PnL        decimal.Decimal
	BuyLabels  []string
	Labels     []string
}

// SortHistory sorts trades in history order: ts, then broker, then ext_id.
func SortHistory(trades []Trade) {
	slices.SortStableFunc(trades, func(a, b Trade) int {
		if c := a.TS.Compare(b.TS); c != 0 {
			return c
		}
		return cmp.Or(cmp.Compare(a.Broker, b.Broker), cmp.Compare(a.ExtID, b.ExtID))
	})
}

// Score computes realized P/L (FIFO per symbol, Ledger) and the v1 labels
// over one user's whole trade history, and returns the trades with ts >=
// since in history order. history may be in any order (Score sorts a
// copy); it must hold one user's trades, all of them: lots and labels of a
// trade depend on every earlier one.
func Score(history []Trade, since time.Time) []Scored {
	trades := slices.Clone(history)
	SortHistory(trades)
	ledger := NewLedger()
	fills := make([]Fill, len(trades))
	names := make([][]string, len(trades))
	var out []Scored
	lo := 0 // first trade inside the overtrading window of trade i
	for i, t := range trades {
		fills[i] = ledger.Apply(i, t)
		for !trades[lo].TS.After(t.TS.Add(-OvertradingWindow)) {
			lo++
		}
		labels := labelsOf(trades, fills, i, i-lo+1)
		for _, l := range labels {
			names[i] = append(names[i], l.Name)
		}
		if t.TS.Before(since) {
			continue
		}
		s := Scored{Trade: t, Realized: fills[i].Realized, Labels: labels}
		for _, m := range fills[i].Lots {
			s.Lots = append(s.Lots, ScoredLot{
				BuyTradeID: trades[m.BuyIdx].ID, Qty: m.Qty, PnL: m.PnL,
				BuyLabels: union(names[m.BuyIdx], nil), Labels: union(names[m.BuyIdx], names[i]),
			})
		}
		out = append(out, s)
	}
	return out
}

// labelsOf returns the labels of trades[i], given the fills of trades[:i+1]
// and n, the number of trades in its overtrading window.
func labelsOf(trades []Trade, fills []Fill, i, n int) []Label {
	t := trades[i]
	var labels []Label
	if n >= OvertradingMin {
		labels = append(labels, Label{
			Name: LabelOvertrading, Confidence: min(1, float64(n)/OvertradingFull),
			Features: map[string]any{"trades_in_window": n, "window_minutes": int(OvertradingWindow / time.Minute)},
		})
	}
	if t.Side != Buy {
		return labels
	}
	if i > 0 {
		prev := trades[i-1]
		gap := t.TS.Sub(prev.TS)
		if prev.Side == Sell && fills[i-1].Realized.Sign() < 0 && gap <= RevengeWindow {
			labels = append(labels, Label{
				Name: LabelRevengeTrading, Confidence: RevengeConfidence,
				Features: map[string]any{
					"after_sell_trade_id": prev.ID, "sell_realized_pnl": fixed8(fills[i-1].Realized),
					"minutes_after": gap.Minutes(),
				},
			})
		}
	}
	if k := min(i, SizeLookback); k >= SizeMinHistory {
		sum := decimal.Zero
		for _, p := range trades[i-k : i] {
			sum = sum.Add(p.Notional())
		}
		// notional >= factor × sum / k, without dividing.
		if t.Notional().Mul(decimal.NewFromInt(int64(k))).Cmp(sum.Mul(decimal.NewFromInt(SizeEscalationFactor))) >= 0 {
			labels = append(labels, Label{
				Name: LabelSizeEscalation, Confidence: SizeEscalationConfidence,
				Features: map[string]any{
					"notional":               exactString(t.Notional()),
					"mean_previous_notional": fixed8(divHalfEven(sum, decimal.NewFromInt(int64(k)), PnLPlaces)),
					"previous_trades":        k,
				},
			})
		}
	}
	slices.SortFunc(labels, func(a, b Label) int { return cmp.Compare(a.Name, b.Name) })
	return labels
}

// union returns the sorted distinct strings of a and b (never nil).
func union(a, b []string) []string {
	out := append(append(make([]string, 0, len(a)+len(b)), a...), b...)
	slices.Sort(out)
	return slices.Compact(out)
}

// LabelNames returns the names of s's labels, sorted (never nil).
func (s Scored) LabelNames() []string {
	names := make([]string, 0, len(s.Labels))
	for _, l := range s.Labels {
		names = append(names, l.Name)
	}
	return names
}

// Payload is s's trade.scored payload.
func (s Scored) Payload() TradeScored {
	realized := Fixed8{s.Realized}
	p := TradeScored{
		TradeFields: FieldsOf(s.Trade), RealizedPnL: &realized, LotLabels: []string{}, Labels: s.LabelNames(), Lots: []LotPnL{},
	}
	for _, l := range s.Lots {
		p.Lots = append(p.Lots, LotPnL{Qty: Exact{l.Qty}, PnL: Fixed8{l.PnL}, Labels: l.Labels})
		p.LotLabels = union(p.LotLabels, l.BuyLabels)
	}
	return p
}
