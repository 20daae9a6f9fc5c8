package trades_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeCoinbase answers GET /api/v3/brokerage/orders/historical/fills like
// Coinbase's Advanced Trade API: bearer auth (401 otherwise), fills after
// start_sequence_timestamp, limit and an opaque cursor, and — when
// throttle names a cursor — one 429 with Retry-After for that page.
type fakeCoinbase struct {
	token    string
	fills    []map[string]any
	throttle string // cursor answered 429 once ("first" for the first page)

	mu        sync.Mutex
	throttled bool
	requests  []string
}

func newFakeCoinbase(t *testing.T, token string, n int) (*fakeCoinbase, *httptest.Server) {
	f := &fakeCoinbase{token: token}
	base := time.Date(2025, 1, 2, 9, 0, 0, 0, time.UTC)
	for i := range n {
		side := "BUY"
		if i%3 == 2 {
			side = "SELL"
		}
		f.fills = append(f.fills, map[string]any{
			"entry_id": fmt.Sprintf("e%d", i), "trade_id": fmt.Sprintf("cb-%03d", i), "order_id": "o1",
			"trade_time": base.Add(time.Duration(i) * time.Minute).Format(time.RFC3339Nano), "trade_type": "FILL",
			"price": "42000.5", "size": "0.01", "commission": "0.42", "product_id": "BTC-USD", "side": side,
		})
	}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return f, srv
}

func (f *fakeCoinbase) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requests = append(f.requests, r.URL.RequestURI())
	if r.URL.Path != "/api/v3/brokerage/orders/historical/fills" {
		http.NotFound(w, r)
		return
	}
	if r.Header.Get("Authorization") != "Bearer "+f.token {
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = w.Write([]byte(`{"error":"unauthorized","message":"invalid token ` + r.Header.Get("Authorization") + `"}`))
		return
	}
	q := r.URL.Query()
	cursor := q.Get("cursor")
	if f.throttle != "" && !f.throttled && (cursor == f.throttle || cursor == "" && f.throttle == "first") {
		f.throttled = true
		w.Header().Set("Retry-After", "2")
		w.WriteHeader(http.StatusTooManyRequests)
		return
	}
	since, err := time.Parse(time.RFC3339, q.Get("start_sequence_timestamp"))
	limit, lerr := strconv.Atoi(q.Get("limit"))
	if err != nil || lerr != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	from := 0
	if cursor != "" {
		from, _ = strconv.Atoi(strings.TrimPrefix(cursor, "c"))
	}
	var page []map[string]any
	i := from
	for ; i < len(f.fills) && len(page) < limit; i++ {
		ts, _ := time.Parse(time.RFC3339Nano, f.fills[i]["trade_time"].(string))
		if !ts.Before(since) {
			page = append(page, f.fills[i])
		}
	}
	next := ""
	if i < len(f.fills) {
		next = "c" + strconv.Itoa(i)
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"fills": page, "cursor": next, "has_next": next != ""})
}

// fakeBinance answers GET /api/v3/myTrades like Binance's spot API:
// X-MBX-APIKEY and an HMAC-SHA256 signature of the query (401 otherwise),
// trades of one symbol from startTime or fromId, limit, the used weight in
// X-MBX-USED-WEIGHT-1M (usedAfter[n] after the n-th request, default 20
// a request), and one 429 with Retry-After when throttle is set.
type fakeBinance struct {
	key, secret string
	trades      map[string][]map[string]any
	throttle    bool
	used        []int

	mu       sync.Mutex
	requests int
}

func newFakeBinance(t *testing.T, key, secret string, counts map[string]int) (*fakeBinance, *httptest.Server) {
	f := &fakeBinance{key: key, secret: secret, trades: map[string][]map[string]any{}}
	base := time.Date(2025, 1, 3, 0, 0, 0, 0, time.UTC)
	for sym, n := range counts {
		for i := range n {
			f.trades[sym] = append(f.trades[sym], map[string]any{
				"symbol": sym, "id": int64(100 + i), "orderId": int64(7), "orderListId": -1,
				"price": "2500.10000000", "qty": "0.50000000", "quoteQty": "1250.05", "commission": "0.00050000",
				"commissionAsset": "BNB", "time": base.Add(time.Duration(i) * time.Second).UnixMilli(),
				"isBuyer": i%2 == 0, "isMaker": false, "isBestMatch": true,
			})
		}
	}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return f, srv
}

func (f *fakeBinance) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requests++
	if r.URL.Path != "/api/v3/myTrades" {
		http.NotFound(w, r)
		return
	}
	raw := r.URL.RawQuery
	i := strings.LastIndex(raw, "&signature=")
	mac := hmac.New(sha256.New, []byte(f.secret))
	if i >= 0 {
		mac.Write([]byte(raw[:i]))
	}
	if r.Header.Get("X-MBX-APIKEY") != f.key || i < 0 || raw[i+len("&signature="):] != hex.EncodeToString(mac.Sum(nil)) {
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = w.Write([]byte(`{"code":-2015,"msg":"Invalid API-key, IP, or permissions for action."}`))
		return
	}
	if f.throttle {
		f.throttle = false
		w.Header().Set("Retry-After", "3")
		w.WriteHeader(http.StatusTooManyRequests)
		return
	}
	q := r.URL.Query()
	limit, _ := strconv.Atoi(q.Get("limit"))
	var out []map[string]any
	for _, tr := range f.trades[q.Get("symbol")] {
		if v := q.Get("fromId"); v != "" {
			from, _ := strconv.ParseInt(v, 10, 64)
			if tr["id"].(int64) < from {
				continue
			}
		} else if v := q.Get("startTime"); v != "" {
			st, _ := strconv.ParseInt(v, 10, 64)
			if tr["time"].(int64) < st {
				continue
			}
		}
		if len(out) < limit {
			out = append(out, tr)
		}
	}
	used := 20 * f.requests
	if f.requests <= len(f.used) {
		used = f.used[f.requests-1]
	}
	w.Header().Set("X-MBX-USED-WEIGHT-1M", strconv.Itoa(used))
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}
