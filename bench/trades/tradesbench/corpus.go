package main

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/shopspring/decimal"

	"github.com/sluicehq/sluice/pipelines/trades"
)

// corpusSpec sizes the corpus: Users users with PerUser trades each,
// spread evenly over Weeks ISO weeks from Start (a Monday, UTC).
type corpusSpec struct {
	Users, PerUser, Weeks int
	Start                 time.Time
	Seed                  uint64
}

// weeks returns the corpus's digest windows.
func (c corpusSpec) weeks() []trades.Window {
	out := make([]trades.Window, c.Weeks)
	for i := range out {
		s := c.Start.AddDate(0, 0, 7*i)
		out[i] = trades.Window{Start: s, End: s.AddDate(0, 0, 7)}
	}
	return out
}

func (c corpusSpec) userID(i int) string { return fmt.Sprintf("bu%05d", i) }

var benchSymbols = []string{"BTC-USD", "ETH-USD", "SOL-USD"}

// userTrades is user i's trade history: PerUser/Weeks trades a week (the
// remainder in the last week), in bursts of 1–14 trades a few minutes apart
// (so overtrading and revenge trading occur), BUYs of 0.01–2 units with an
// occasional 5× one (size escalation), SELLs of 30–100 % of the open
// position, prices on a per-symbol random walk. Deterministic in (Seed, i).
func (c corpusSpec) userTrades(i int) []trades.Trade {
	rng := rand.New(rand.NewPCG(c.Seed, uint64(i)))
	user := c.userID(i)
	price := map[string]float64{}
	pos := map[string]decimal.Decimal{}
	for k, s := range benchSymbols {
		price[s] = float64(100*(k+1)) * (0.5 + rng.Float64())
		pos[s] = decimal.Zero
	}
	perWeek := c.PerUser / c.Weeks
	var times []time.Time
	for w, win := range c.weeks() {
		n := perWeek
		if w == c.Weeks-1 {
			n = c.PerUser - perWeek*(c.Weeks-1)
		}
		var week []time.Time
		for len(week) < n {
			at := win.Start.Add(time.Duration(rng.Int64N(int64(7*24*time.Hour - 2*time.Hour))))
			for b := 1 + rng.IntN(14); b > 0 && len(week) < n; b-- {
				week = append(week, at.Truncate(time.Second))
				at = at.Add(time.Duration(60+rng.IntN(360)) * time.Second)
			}
		}
		times = append(times, week...)
	}
	slices.SortFunc(times, func(a, b time.Time) int { return a.Compare(b) })
	out := make([]trades.Trade, 0, len(times))
	for k, at := range times {
		sym := benchSymbols[rng.IntN(len(benchSymbols))]
		price[sym] *= 1 + rng.NormFloat64()*0.01
		px := decimal.NewFromFloat(price[sym]).Round(2)
		if px.Sign() <= 0 {
			px = decimal.New(1, -2)
		}
		side, qty := trades.Buy, decimal.NewFromFloat(0.01+rng.Float64()*2).Round(4)
		if rng.IntN(20) == 0 {
			qty = qty.Mul(decimal.NewFromInt(5))
		}
		if pos[sym].Sign() > 0 && rng.IntN(100) < 45 {
			side = trades.Sell
			qty = pos[sym].Mul(decimal.NewFromFloat(0.3 + 0.7*rng.Float64())).Round(4)
			if qty.Sign() <= 0 {
				qty = decimal.New(1, -4)
			}
		}
		if side == trades.Buy {
			pos[sym] = pos[sym].Add(qty)
		} else {
			pos[sym] = decimal.Max(decimal.Zero, pos[sym].Sub(qty))
		}
		ext := fmt.Sprintf("x%04d", k)
		out = append(out, trades.Trade{
			ID: trades.TradeID(user, "synthetic", ext), UserID: user, Broker: "synthetic", ExtID: ext, Symbol: sym,
			Side: side, Qty: qty, Price: px, Fee: qty.Mul(px).Mul(decimal.New(1, -3)).Round(4), TS: at,
		})
	}
	return out
}

// scoredRecord is one trade.scored record of the corpus: its key, value
// and event time.
type scoredRecord struct {
	Key   string
	Value []byte
	TS    time.Time
	// Payload is the decoded payload the value carries.
	Payload trades.TradeScored
}

// userRecords scores user i's history as trades-score does and returns its
// trade.scored records in history order.
func (c corpusSpec) userRecords(i int) ([]scoredRecord, error) {
	scored := trades.Score(c.userTrades(i), c.Start)
	out := make([]scoredRecord, 0, len(scored))
	for _, s := range scored {
		p := s.Payload()
		body, err := json.Marshal(p)
		if err != nil {
			return nil, fmt.Errorf("payload of %s: %w", s.Trade.ID, err)
		}
		ev := trades.Event[trades.TradeScored]{
			EventID: trades.TradeScoredEventID(s.Trade.ID, body), Type: trades.TypeTradeScored,
			Timestamp: s.Trade.TS.Add(time.Minute), Payload: p,
		}
		v, err := json.Marshal(ev)
		if err != nil {
			return nil, fmt.Errorf("event of %s: %w", s.Trade.ID, err)
		}
		out = append(out, scoredRecord{Key: s.Trade.UserID, Value: v, TS: s.Trade.TS, Payload: p})
	}
	return out, nil
}

// digestKey names one expected digest: "user|start".
func digestKey(user string, w trades.Window) string { return user + "|" + w.StartDate() }

// expectedDigests computes every (user, week) digest of the corpus with
// trades.Aggregate, as {user_id, period, agg} JSON, keyed by digestKey.
func (c corpusSpec) expectedDigests() (map[string][]byte, error) {
	out := map[string][]byte{}
	for i := range c.Users {
		recs, err := c.userRecords(i)
		if err != nil {
			return nil, err
		}
		contrib := make(map[string]trades.TradeScored, len(recs))
		for _, r := range recs {
			contrib[r.Payload.TradeID] = r.Payload
		}
		for _, w := range c.weeks() {
			body, err := json.Marshal(peerDigest{UserID: c.userID(i), Period: w.Period(), Agg: trades.Aggregate(w, contrib)})
			if err != nil {
				return nil, err
			}
			out[digestKey(c.userID(i), w)] = body
		}
	}
	return out, nil
}

// peerDigest is the digest record the peer writes: the digest object's
// body without revision and partial (a Kafka Streams window emits once).
type peerDigest struct {
	UserID string        `json:"user_id"`
	Period trades.Period `json:"period"`
	Agg    trades.Agg    `json:"agg"`
}
