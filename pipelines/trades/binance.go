package trades

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// DefaultBinanceURL is Binance's spot API base URL.
const DefaultBinanceURL = "https://api.binance.com"

// defaultBinanceSymbols are the symbols a binance import reads by default.
func defaultBinanceSymbols() []string { return []string{"BTCUSDT", "ETHUSDT"} }

// binanceWeightLimit is the request weight Binance allows a minute.
const binanceWeightLimit = 6000

// Binance is the binance BrokerAdapter. It uses one signed endpoint of the
// spot API, the account's trades of one symbol:
//
//	GET /api/v3/myTrades?symbol=<S>&limit=<Limit>&(startTime=<since ms>|fromId=<id>)
//	    &timestamp=<now ms>&signature=<hex HMAC-SHA256 of the query, key: the secret>
//	X-MBX-APIKEY: <API key>
//	→ [{"symbol","id","price","qty","commission","time","isBuyer",…}]
//
// The access token of a binance connection is "API_KEY:SECRET". Binance
// answers per symbol, so an import walks Symbols in order; the cursor is
// "<symbol index>:<next fromId>" (a full page continues the symbol from
// its last id + 1, a shorter one moves to the next symbol). A trade
// becomes {id: "SYMBOL:id", symbol, side: BUY when isBuyer else SELL, qty,
// price, fee: commission, ts: time as RFC 3339}. The header
// X-MBX-USED-WEIGHT-1M gives the rate-limit budget (remaining = 6000 −
// used, reset at the next minute); 429 and 418 answers carry Retry-After.
// Safe for concurrent use.
type Binance struct {
	base    string
	symbols []string
	hc      *http.Client
	Limit   int              // trades a page (default 1000, Binance's maximum)
	now     func() time.Time // the request timestamp's clock
}

// NewBinance returns the adapter on base (default DefaultBinanceURL)
// reading symbols (default BTCUSDT, ETHUSDT) with hc (default
// http.DefaultClient).
func NewBinance(base string, symbols []string, hc *http.Client) *Binance {
	if base == "" {
		base = DefaultBinanceURL
	}
	if len(symbols) == 0 {
		symbols = defaultBinanceSymbols()
	}
	return &Binance{base: strings.TrimSuffix(base, "/"), symbols: append([]string(nil), symbols...), hc: hc, Limit: 1000, now: time.Now}
}

type binanceTrade struct {
	Symbol     string          `json:"symbol"`
	ID         int64           `json:"id"`
	Price      json.RawMessage `json:"price"`
	Qty        json.RawMessage `json:"qty"`
	Commission json.RawMessage `json:"commission"`
	Time       int64           `json:"time"`
	IsBuyer    bool            `json:"isBuyer"`
}

// FetchTrades implements BrokerAdapter.
func (b *Binance) FetchTrades(ctx context.Context, req FetchRequest) (Page, error) {
	key, secret, ok := strings.Cut(req.AccessToken, ":")
	if !ok || key == "" || secret == "" {
		return Page{}, &BrokerError{Status: http.StatusUnauthorized}
	}
	idx, fromID, err := parseBinanceCursor(req.Cursor, len(b.symbols))
	if err != nil {
		return Page{}, fmt.Errorf("binance: %w", err)
	}
	limit := max(b.Limit, 1)
	q := url.Values{}
	q.Set("symbol", b.symbols[idx])
	q.Set("limit", strconv.Itoa(limit))
	if fromID != "" {
		q.Set("fromId", fromID)
	} else {
		q.Set("startTime", strconv.FormatInt(req.Since.UnixMilli(), 10))
	}
	q.Set("timestamp", strconv.FormatInt(b.now().UnixMilli(), 10))
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(q.Encode()))
	query := q.Encode() + "&signature=" + hex.EncodeToString(mac.Sum(nil))
	hreq, err := http.NewRequest(http.MethodGet, b.base+"/api/v3/myTrades?"+query, nil)
	if err != nil {
		return Page{}, fmt.Errorf("binance: %w", err)
	}
	hreq.Header.Set("X-MBX-APIKEY", key)
	var ans []binanceTrade
	hdr, err := brokerGet(ctx, b.hc, hreq, &ans)
	if err != nil {
		var be *BrokerError
		if errors.As(err, &be) && be.Status == http.StatusTeapot { // an IP ban: wait like a 429
			be.Status = http.StatusTooManyRequests
		}
		return Page{}, fmt.Errorf("binance: %w", err)
	}
	var p Page
	for _, t := range ans {
		side := "SELL"
		if t.IsBuyer {
			side = "BUY"
		}
		p.Trades = append(p.Trades, RawTrade{
			ID: quoteJSON(t.Symbol + ":" + strconv.FormatInt(t.ID, 10)), Symbol: quoteJSON(t.Symbol), Side: quoteJSON(side),
			Qty: t.Qty, Price: t.Price, Fee: t.Commission, TS: quoteJSON(time.UnixMilli(t.Time).UTC().Format(time.RFC3339Nano)),
		})
	}
	switch {
	case len(ans) >= limit:
		p.Next = strconv.Itoa(idx) + ":" + strconv.FormatInt(ans[len(ans)-1].ID+1, 10)
	case idx+1 < len(b.symbols):
		p.Next = strconv.Itoa(idx+1) + ":"
	}
	if used, err := strconv.Atoi(hdr.Get("X-MBX-USED-WEIGHT-1M")); err == nil {
		now := b.now()
		p.RateLimit = &RateLimit{Remaining: max(binanceWeightLimit-used, 0), Reset: now.Truncate(time.Minute).Add(time.Minute).Sub(now)}
	}
	return p, nil
}

// parseBinanceCursor reads "<symbol index>:<fromId>" (empty: the first
// symbol from since).
func parseBinanceCursor(cursor string, symbols int) (int, string, error) {
	if cursor == "" {
		return 0, "", nil
	}
	i, from, ok := strings.Cut(cursor, ":")
	idx, err := strconv.Atoi(i)
	if !ok || err != nil || idx < 0 || idx >= symbols {
		return 0, "", fmt.Errorf("cursor %q is not <symbol index>:<fromId> of %d symbols", clip(cursor), symbols)
	}
	return idx, from, nil
}
