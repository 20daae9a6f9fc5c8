package trades

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
	"github.com/shopspring/decimal"
)

// benchWindows returns the contribution sets of users × weeks windows of a
// corpus shaped like bench-trades' (600 trades a user over 8 weeks, in
// bursts, synthetic broker, prices of 2 and quantities of 4 decimals).
func benchWindows(tb testing.TB, users int) map[string]windowContribs {
	tb.Helper()
	out := map[string]windowContribs{}
	w0, _ := ParseISOWeek("2025-W02")
	for u := range users {
		rng := rand.New(rand.NewPCG(16, uint64(u)))
		user := fmt.Sprintf("bu%05d", u)
		var hist []Trade
		at := w0.Start
		for i := range 600 {
			at = at.Add(time.Duration(60+rng.IntN(360)) * time.Second)
			if rng.IntN(8) == 0 {
				at = at.Add(time.Duration(rng.IntN(20)) * time.Hour)
			}
			if !at.Before(w0.Start.AddDate(0, 0, 56)) {
				at = w0.Start.AddDate(0, 0, 56).Add(-time.Hour)
			}
			side := Buy
			if rng.IntN(100) < 45 {
				side = Sell
			}
			qty := decimal.NewFromFloat(0.01 + rng.Float64()*2).Round(4)
			px := decimal.NewFromFloat(100 + rng.Float64()*200).Round(2)
			ext := fmt.Sprintf("x%04d", i)
			hist = append(hist, Trade{ID: TradeID(user, "synthetic", ext), UserID: user, Broker: "synthetic", ExtID: ext,
				Symbol: "BTC-USD", Side: side, Qty: qty, Price: px, Fee: qty.Mul(px).Mul(decimal.New(1, -3)).Round(4), TS: at})
		}
		for _, s := range Score(hist, time.Time{}) {
			p := s.Payload()
			w := WeekOf(p.TS)
			k := ContributionsKey(user, w)
			if out[k] == nil {
				out[k] = windowContribs{}
			}
			key, enc := encodeContrib(user, contribOf(p))
			out[k][key] = enc
		}
	}
	return out
}

// BenchmarkDigestChangelogBytes reports the bytes per trade of the digest
// store's contribution sets as written (B/trade) and as snappy and zstd
// batches of 64 sets would store them (the producer's codecs).
func BenchmarkDigestChangelogBytes(b *testing.B) {
	wins := benchWindows(b, 50)
	var sets [][]byte
	trades := 0
	for k, m := range wins {
		raw, err := encodeDigestEntry(digestEntry{User: k[2:9], Contribs: m})
		if err != nil {
			b.Fatal(err)
		}
		sets = append(sets, raw)
		trades += len(m)
	}
	zs, _ := zstd.NewWriter(nil)
	var rawN, snappyN, zstdN int
	for range b.N {
		rawN, snappyN, zstdN = 0, 0, 0
		for i := 0; i < len(sets); i += 64 {
			batch := bytes.Join(sets[i:min(i+64, len(sets))], nil)
			rawN += len(batch)
			snappyN += len(s2.EncodeSnappy(nil, batch))
			zstdN += len(zs.EncodeAll(batch, nil))
		}
	}
	b.ReportMetric(float64(rawN)/float64(trades), "raw-B/trade")
	b.ReportMetric(float64(snappyN)/float64(trades), "snappy-B/trade")
	b.ReportMetric(float64(zstdN)/float64(trades), "zstd-B/trade")
}
