package trades

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/shopspring/decimal"
)

// Defaults and bounds of the synthetic broker.
const (
	SyntheticTrades   = 500  // trades of an import
	SyntheticPageSize = 100  // trades a page
	syntheticMaxTrade = 1e5  // most trades an import may ask for
	syntheticMaxPage  = 1000 // largest page
)

// Synthetic is the deterministic synthetic broker: an import's trades
// depend only on (user_id, since) and its options, so a re-import finds the
// same trades under the same ext ids. It produces bursts of 12 trades 4
// minutes apart every 3 hours from since on, over three symbols, with fees
// as strings or numbers and sometimes absent. Its faults, from the import's
// options, are counted per (import, page) for the adapter's lifetime:
//
//   - fail_page: that page answers 503 fail_times times (default 1), then
//     serves;
//   - http429_page: that page answers 429 once, with Retry-After
//     retry_after_ms;
//   - exhaust_page: that page reports a rate limit with remaining 0 and
//     reset reset_ms;
//   - page_latency_ms: every fetch waits that long (or until ctx ends).
//
// The cursor is the next page's number. There is no percent. Safe for
// concurrent use.
type Synthetic struct {
	mu       sync.Mutex
	attempts map[syntheticFault]int
}

type syntheticFault struct {
	importID string
	page     int
	kind     string
}

// NewSynthetic returns a synthetic broker with no fault counted yet.
func NewSynthetic() *Synthetic {
	return &Synthetic{attempts: map[syntheticFault]int{}}
}

// syntheticShape is the options with defaults and bounds applied.
func syntheticShape(o *SyntheticOptions) SyntheticOptions {
	var s SyntheticOptions
	if o != nil {
		s = *o
	}
	if s.Trades <= 0 {
		s.Trades = SyntheticTrades
	}
	s.Trades = min(s.Trades, syntheticMaxTrade)
	if s.PageSize <= 0 {
		s.PageSize = SyntheticPageSize
	}
	s.PageSize = min(s.PageSize, syntheticMaxPage)
	if s.FailTimes <= 0 {
		s.FailTimes = 1
	}
	return s
}

// FetchTrades implements BrokerAdapter.
func (s *Synthetic) FetchTrades(ctx context.Context, req FetchRequest) (Page, error) {
	o := syntheticShape(req.Options)
	page := 1
	if req.Cursor != "" {
		p, err := strconv.Atoi(req.Cursor)
		if err != nil || p < 1 {
			return Page{}, &BrokerError{Status: 400}
		}
		page = p
	}
	if o.PageLatencyMS > 0 {
		t := time.NewTimer(time.Duration(o.PageLatencyMS) * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return Page{}, fmt.Errorf("synthetic broker: %w", ctx.Err())
		case <-t.C:
		}
	}
	if page == o.FailPage && s.count(req.ImportID, page, "fail") <= o.FailTimes {
		return Page{}, &BrokerError{Status: 503}
	}
	if page == o.HTTP429Page && s.count(req.ImportID, page, "429") == 1 {
		return Page{}, &BrokerError{Status: 429, RetryAfter: time.Duration(o.RetryAfterMS) * time.Millisecond}
	}

	first := (page - 1) * o.PageSize
	last := min(first+o.PageSize, o.Trades)
	var p Page
	seed := sha256.Sum256([]byte(req.UserID + "|" + req.Since.UTC().Format(time.RFC3339Nano)))
	for i := first; i < last; i++ {
		p.Trades = append(p.Trades, syntheticTrade(seed, req.Since, i))
	}
	if last < o.Trades {
		p.Next = strconv.Itoa(page + 1)
	}
	if page == o.ExhaustPage {
		p.RateLimit = &RateLimit{Remaining: 0, Reset: time.Duration(o.ResetMS) * time.Millisecond}
	}
	return p, nil
}

// count records one more attempt at a fault and returns how many there
// were, this one included.
func (s *Synthetic) count(importID string, page int, kind string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := syntheticFault{importID, page, kind}
	s.attempts[k]++
	return s.attempts[k]
}

// syntheticTrade is trade i of the import seeded by seed: a function of
// (seed, since, i) alone.
func syntheticTrade(seed [32]byte, since time.Time, i int) RawTrade {
	rng := rand.New(rand.NewPCG(binary.BigEndian.Uint64(seed[:8]), binary.BigEndian.Uint64(seed[8:16])+uint64(i)))
	symbols := [...]struct {
		name string
		base int64 // price in cents
	}{{"BTC-USD", 6_000_000}, {"ETH-USD", 300_000}, {"SOL-USD", 15_000}}
	sym := symbols[rng.IntN(len(symbols))]
	side := "buy"
	if rng.IntN(5) >= 3 {
		side = "SELL"
	}
	qty := decimal.New(int64(100+rng.IntN(19_900)), -4)                // 0.0100 … 1.9999
	price := decimal.New(sym.base*int64(950+rng.IntN(101))/1000, -2)   // base ± 5 %
	fee := qty.Mul(price).Mul(decimal.New(1, -3)).RoundBank(PnLPlaces) // 0.1 %
	ts := since.UTC().Add(time.Duration(i/12)*3*time.Hour + time.Duration(i%12)*4*time.Minute)
	r := RawTrade{
		ID:     quoteJSON(fmt.Sprintf("syn-%05d", i)),
		Symbol: quoteJSON(sym.name),
		Side:   quoteJSON(side),
		Qty:    quoteJSON(exactString(qty)),
		Price:  json.RawMessage(exactString(price)), // a JSON number
		TS:     quoteJSON(ts.Format(time.RFC3339)),
	}
	if i%7 != 0 {
		r.Fee = quoteJSON(exactString(fee))
	}
	return r
}

func quoteJSON(s string) json.RawMessage {
	b, _ := json.Marshal(s)
	return b
}
