package trades

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// DefaultCoinbaseURL is the Coinbase Advanced Trade API's base URL.
const DefaultCoinbaseURL = "https://api.coinbase.com"

// Coinbase is the coinbase BrokerAdapter. It uses one endpoint of the
// Advanced Trade API, the user's fills:
//
//	GET /api/v3/brokerage/orders/historical/fills
//	    ?start_sequence_timestamp=<since, RFC 3339>&limit=<Limit>[&cursor=<cursor>]
//	Authorization: Bearer <access token>
//	→ {"fills":[{"trade_id","product_id","side","size","price","commission","trade_time",…}],"cursor":"…"}
//
// A fill becomes {id: trade_id, symbol: product_id, side, qty: size, price,
// fee: commission, ts: trade_time}. The answer's cursor is the next page's
// (a page without fills or without a cursor is the last). 429 answers carry
// Retry-After; there is no percent and no rate-limit budget. Safe for
// concurrent use.
type Coinbase struct {
	base  string
	hc    *http.Client
	Limit int // fills a page (default 100)
}

// NewCoinbase returns the adapter on base (default DefaultCoinbaseURL)
// with hc (default http.DefaultClient).
func NewCoinbase(base string, hc *http.Client) *Coinbase {
	if base == "" {
		base = DefaultCoinbaseURL
	}
	return &Coinbase{base: strings.TrimSuffix(base, "/"), hc: hc, Limit: 100}
}

type coinbaseFills struct {
	Fills []struct {
		TradeID    json.RawMessage `json:"trade_id"`
		ProductID  json.RawMessage `json:"product_id"`
		Side       json.RawMessage `json:"side"`
		Size       json.RawMessage `json:"size"`
		Price      json.RawMessage `json:"price"`
		Commission json.RawMessage `json:"commission"`
		TradeTime  json.RawMessage `json:"trade_time"`
	} `json:"fills"`
	Cursor string `json:"cursor"`
}

// FetchTrades implements BrokerAdapter.
func (c *Coinbase) FetchTrades(ctx context.Context, req FetchRequest) (Page, error) {
	q := url.Values{}
	q.Set("start_sequence_timestamp", req.Since.UTC().Format(time.RFC3339))
	q.Set("limit", strconv.Itoa(max(c.Limit, 1)))
	if req.Cursor != "" {
		q.Set("cursor", req.Cursor)
	}
	hreq, err := http.NewRequest(http.MethodGet, c.base+"/api/v3/brokerage/orders/historical/fills?"+q.Encode(), nil)
	if err != nil {
		return Page{}, fmt.Errorf("coinbase: %w", err)
	}
	hreq.Header.Set("Authorization", "Bearer "+req.AccessToken)
	hreq.Header.Set("Accept", "application/json")
	var ans coinbaseFills
	if _, err := brokerGet(ctx, c.hc, hreq, &ans); err != nil {
		return Page{}, fmt.Errorf("coinbase: %w", err)
	}
	var p Page
	for _, f := range ans.Fills {
		p.Trades = append(p.Trades, RawTrade{ID: f.TradeID, Symbol: f.ProductID, Side: f.Side, Qty: f.Size, Price: f.Price, Fee: f.Commission, TS: f.TradeTime})
	}
	if len(ans.Fills) > 0 {
		p.Next = ans.Cursor
	}
	return p, nil
}
