package trades

import (
	"cmp"
	"math"
	"slices"
	"time"

	"github.com/shopspring/decimal"
)

// Agg is the aggregate of a user's scored trades in a digest window.
// Amounts are exact sums, written with 8 fractional digits (Fixed8).
type Agg struct {
	Trades      int    `json:"trades"`
	Buys        int    `json:"buys"`
	Sells       int    `json:"sells"`
	Notional    Fixed8 `json:"notional"`     // Σ qty × price
	Fees        Fixed8 `json:"fees"`         // Σ fee
	RealizedPnL Fixed8 `json:"realized_pnl"` // Σ realized_pnl
	// CountsByLabel counts the trades carrying each label.
	CountsByLabel map[string]int `json:"counts_by_label"`
	// PnLByLabel attributes each matched lot's P/L (fee share included)
	// once to every label of the lot (the union of its opening BUY's and
	// closing SELL's labels), or to "unlabelled" when it has none. A SELL
	// that matched no lot attributes nothing (its realized P/L, minus its
	// fee, is only in RealizedPnL).
	PnLByLabel map[string]Fixed8 `json:"pnl_by_label"`
	// BiasedTradeShare is the share of trades with at least one label,
	// rounded to 4 decimals; 0 without trades.
	BiasedTradeShare float64 `json:"biased_trade_share"`
	Streaks          Streaks `json:"streaks"`
	// TopInsight is the label with the most negative P/L in PnLByLabel
	// ("unlabelled" is not a label); ties go to the larger count in
	// CountsByLabel, then to the smaller name. Nil when no label's P/L is
	// negative.
	TopInsight *TopInsight `json:"top_insight"`
}

// Streaks are the longest runs of winning and losing SELLs (realized P/L
// > 0 and < 0; SELLs at 0 are skipped, they neither extend nor break a run)
// in history order.
type Streaks struct {
	LongestWin  int `json:"longest_win"`
	LongestLoss int `json:"longest_loss"`
}

// TopInsight names the label that cost the most.
type TopInsight struct {
	Label string `json:"label"`
	PnL   Fixed8 `json:"pnl"`
}

// DigestObject is the body of a digest's object (DigestObjectKey).
type DigestObject struct {
	UserID   string `json:"user_id"`
	Period   Period `json:"period"`
	Revision int    `json:"revision"`
	Partial  bool   `json:"partial"`
	Agg      Agg    `json:"agg"`
}

// WindowState is the value of a window's key in the digest store
// (WindowStateKey), written as the JSON object its tags name
// (schemas/json/trades.digest.state.json): the revision of its contributions (above
// EmittedRevision while a change is pending), the last revision emitted
// and when a contribution last changed it. EmittedAgg (a hash of the
// emitted aggregate) and EmittedPartial describe the last emission, so
// that changes that leave the aggregate as emitted make no revision and a
// partial emission is followed by a final one.
//
// Publishing says that EmittedRevision's digest.ready may have been
// published without this state being written after it: it is written
// (durable) before the publish, at PublishMark (wall clock), and cleared
// by the write after it. A restored window with Publishing set looks for
// its digest.ready on the topic (records timestamped from PublishMark on)
// and publishes it only when it is not there.
type WindowState struct {
	Revision        int       `json:"revision"`
	EmittedRevision int       `json:"emitted_revision"`
	LastChange      time.Time `json:"last_change"`
	EmittedAgg      string    `json:"emitted_agg,omitempty"`
	EmittedPartial  bool      `json:"emitted_partial,omitempty"`
	Publishing      bool      `json:"publishing,omitempty"`
	PublishMark     time.Time `json:"publish_mark,omitzero"`
}

// Aggregate computes the digest of window w from the contributions of one
// user, keyed by trade id (the digest store holds one contribution, the
// latest trade.scored, per trade). Contributions with ts outside w are
// ignored. The result depends only on the set of contributions: not on map
// order, nor on how often or in which order they were stored.
func Aggregate(w Window, contributions map[string]TradeScored) Agg {
	in := make([]contrib, 0, len(contributions))
	for _, c := range contributions {
		if w.Contains(c.TS) {
			in = append(in, contribOf(c))
		}
	}
	return aggregate(w, in)
}

// aggregate is Aggregate over contributions (one per trade id); it sorts
// in in place.
func aggregate(w Window, in []contrib) Agg {
	in = slices.DeleteFunc(in, func(c contrib) bool { return !w.Contains(c.TS) })
	slices.SortFunc(in, func(a, b contrib) int {
		return cmp.Or(a.TS.Compare(b.TS), cmp.Compare(a.Broker, b.Broker), cmp.Compare(a.ExtID, b.ExtID),
			cmp.Compare(a.TradeID, b.TradeID))
	})

	a := Agg{CountsByLabel: map[string]int{}, PnLByLabel: map[string]Fixed8{}}
	notional, fees, realized := decimal.Zero, decimal.Zero, decimal.Zero
	pnl := map[string]decimal.Decimal{}
	biased := 0
	var win, loss int
	for _, c := range in {
		a.Trades++
		notional = notional.Add(c.Notional)
		fees = fees.Add(c.Fee)
		if len(c.Labels) > 0 {
			biased++
		}
		for _, l := range c.Labels {
			a.CountsByLabel[l]++
		}
		if !c.Sell {
			a.Buys++
			continue
		}
		a.Sells++
		r := c.Realized
		realized = realized.Add(r)
		for _, lot := range c.Lots {
			labels := lot.Labels
			if len(labels) == 0 {
				labels = []string{LabelNone}
			}
			for _, l := range labels {
				pnl[l] = pnl[l].Add(lot.PnL)
			}
		}
		switch r.RoundBank(PnLPlaces).Sign() {
		case 1:
			win, loss = win+1, 0
		case -1:
			win, loss = 0, loss+1
		}
		a.Streaks.LongestWin = max(a.Streaks.LongestWin, win)
		a.Streaks.LongestLoss = max(a.Streaks.LongestLoss, loss)
	}
	a.Notional, a.Fees, a.RealizedPnL = Fixed8{notional}, Fixed8{fees}, Fixed8{realized}
	for l, v := range pnl {
		a.PnLByLabel[l] = Fixed8{v}
	}
	if a.Trades > 0 {
		a.BiasedTradeShare = math.Round(float64(biased)/float64(a.Trades)*1e4) / 1e4
	}
	a.TopInsight = topInsight(pnl, a.CountsByLabel)
	return a
}

func topInsight(pnl map[string]decimal.Decimal, counts map[string]int) *TopInsight {
	var best *TopInsight
	for l, v := range pnl {
		if l == LabelNone || v.Sign() >= 0 {
			continue
		}
		if best == nil {
			best = &TopInsight{Label: l, PnL: Fixed8{v}}
			continue
		}
		c := cmp.Or(v.Cmp(best.PnL.Decimal), cmp.Compare(counts[best.Label], counts[l]), cmp.Compare(l, best.Label))
		if c < 0 {
			best = &TopInsight{Label: l, PnL: Fixed8{v}}
		}
	}
	return best
}

// distinct returns the distinct strings of s, sorted.
func distinct(s []string) []string { return union(s, nil) }
