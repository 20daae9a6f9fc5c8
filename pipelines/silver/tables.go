package silver

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/sluicehq/sluice/sinks/pgsink"
	"github.com/sluicehq/sluice/stages"
	"github.com/sluicehq/sluice/stages/run"
)

// Table names (seed DDL).
const (
	TATableName = "ta_silver"
	SATableName = "sa_silver"
)

// TATable describes the ta_silver upsert: key (symbol, trade_date); every
// value column takes the incoming value, first_seen_time keeps the earliest
// (LEAST), ingest_time = now() — the seed's upsert made exact, matching
// [MergeTA].
func TATable() pgsink.Table[TARow] {
	return pgsink.Table[TARow]{
		Name: TATableName,
		Columns: []string{"symbol", "trade_date", "open", "high", "low", "close", "volume", "vwap",
			"adj_close", "currency", "price_multiplier", "source", "first_seen_time", "content_hash"},
		Key: []string{"symbol", "trade_date"},
		Update: []pgsink.Set{
			{Column: "open", Expr: "EXCLUDED.open"},
			{Column: "high", Expr: "EXCLUDED.high"},
			{Column: "low", Expr: "EXCLUDED.low"},
			{Column: "close", Expr: "EXCLUDED.close"},
			{Column: "volume", Expr: "EXCLUDED.volume"},
			{Column: "vwap", Expr: "EXCLUDED.vwap"},
			{Column: "adj_close", Expr: "EXCLUDED.adj_close"},
			{Column: "currency", Expr: "EXCLUDED.currency"},
			{Column: "price_multiplier", Expr: "EXCLUDED.price_multiplier"},
			{Column: "source", Expr: "EXCLUDED.source"},
			{Column: "first_seen_time", Expr: "LEAST(t.first_seen_time, EXCLUDED.first_seen_time)"},
			{Column: "content_hash", Expr: "EXCLUDED.content_hash"},
		},
		Touch: []string{"ingest_time"},
		KeyOf: func(r TARow) string { return r.Key() },
		Merge: MergeTA,
		Values: func(r TARow) []any {
			return []any{r.Symbol, r.TradeDate, r.Open, r.High, r.Low, r.Close, r.Volume, r.VWAP,
				r.AdjClose, r.Currency, r.PriceMultiplier, r.Source, nullTime(r.FirstSeenTime), r.ContentHash}
		},
		KeyValues:  func(r TARow) []any { return []any{r.Symbol, r.TradeDate} },
		AppendCopy: appendTACopy,
	}
}

// appendTACopy encodes the columns of TATable for a binary COPY, by the
// types of ta_silver's DDL (text, date, double precision, bigint,
// timestamptz).
func appendTACopy(b []byte, r TARow) []byte {
	b = pgsink.AppendText(b, r.Symbol)
	b = pgsink.AppendDate(b, r.TradeDate)
	b = pgsink.AppendFloat8(b, r.Open)
	b = pgsink.AppendFloat8(b, r.High)
	b = pgsink.AppendFloat8(b, r.Low)
	b = pgsink.AppendFloat8(b, r.Close)
	b = pgsink.AppendInt8(b, r.Volume)
	b = pgsink.AppendFloat8Ptr(b, r.VWAP)
	b = pgsink.AppendFloat8Ptr(b, r.AdjClose)
	b = pgsink.AppendText(b, r.Currency)
	b = pgsink.AppendFloat8(b, r.PriceMultiplier)
	b = pgsink.AppendTextPtr(b, r.Source)
	b = appendNullTime(b, r.FirstSeenTime)
	return pgsink.AppendTextPtr(b, r.ContentHash)
}

// appendSACopy encodes the columns of SATable for a binary COPY, by the
// types of sa_silver's DDL (text, timestamptz, text[], double precision,
// boolean).
func appendSACopy(b []byte, r SARow) []byte {
	b = pgsink.AppendText(b, r.URLCanonical)
	b = pgsink.AppendText(b, r.SourceDomain)
	b = pgsink.AppendTimestamptz(b, r.PublisherTime)
	b = pgsink.AppendTimestamptz(b, r.FirstSeenTime)
	b = pgsink.AppendTextPtr(b, r.Language)
	b = pgsink.AppendTextPtr(b, r.Title)
	b = pgsink.AppendTextPtr(b, r.TextNormalized)
	b = pgsink.AppendText(b, r.ContentHash)
	b = pgsink.AppendTextArray(b, r.Symbols)
	b = pgsink.AppendTextPtr(b, r.Author)
	b = pgsink.AppendTextArray(b, r.TopicTags)
	b = pgsink.AppendFloat8Ptr(b, r.HypeRaw)
	b = pgsink.AppendFloat8Ptr(b, r.HypeCrowd)
	b = pgsink.AppendFloat8Ptr(b, r.HypeElitist)
	return pgsink.AppendBoolPtr(b, r.AccountWeightsApplied)
}

// appendNullTime is nullTime for a binary COPY.
func appendNullTime(b []byte, t time.Time) []byte {
	if t.IsZero() {
		return pgsink.AppendNull(b)
	}
	return pgsink.AppendTimestamptz(b, t)
}

// SATable describes the sa_silver upsert: key url_canonical;
// publisher_time and first_seen_time keep the earliest; enrichment columns
// take the incoming value unless it is NULL; a new 'unknown' language never
// replaces a stored one; symbols and topic_tags take the incoming array only
// when it is non-empty; content_hash takes the incoming value; source_domain
// keeps the stored value; ingest_time = now() — matching [MergeSA].
func SATable() pgsink.Table[SARow] {
	keepUnlessEmpty := func(col string) string {
		return fmt.Sprintf("CASE WHEN array_length(EXCLUDED.%[1]s, 1) IS NOT NULL THEN EXCLUDED.%[1]s ELSE t.%[1]s END", col)
	}
	coalesce := func(col string) string {
		return fmt.Sprintf("COALESCE(EXCLUDED.%[1]s, t.%[1]s)", col)
	}
	return pgsink.Table[SARow]{
		Name: SATableName,
		Columns: []string{"url_canonical", "source_domain", "publisher_time", "first_seen_time", "language",
			"title", "text_normalized", "content_hash", "symbols", "author", "topic_tags", "hype_raw",
			"hype_crowd", "hype_elitist", "account_weights_applied"},
		Key: []string{"url_canonical"},
		Update: []pgsink.Set{
			{Column: "publisher_time", Expr: "LEAST(t.publisher_time, EXCLUDED.publisher_time)"},
			{Column: "first_seen_time", Expr: "LEAST(t.first_seen_time, EXCLUDED.first_seen_time)"},
			{Column: "language", Expr: "CASE WHEN EXCLUDED.language IS NULL OR (EXCLUDED.language = 'unknown' AND t.language IS NOT NULL) THEN t.language ELSE EXCLUDED.language END"},
			{Column: "title", Expr: coalesce("title")},
			{Column: "text_normalized", Expr: coalesce("text_normalized")},
			{Column: "author", Expr: coalesce("author")},
			{Column: "symbols", Expr: keepUnlessEmpty("symbols")},
			{Column: "topic_tags", Expr: keepUnlessEmpty("topic_tags")},
			{Column: "hype_raw", Expr: coalesce("hype_raw")},
			{Column: "hype_crowd", Expr: coalesce("hype_crowd")},
			{Column: "hype_elitist", Expr: coalesce("hype_elitist")},
			{Column: "account_weights_applied", Expr: coalesce("account_weights_applied")},
			{Column: "content_hash", Expr: "EXCLUDED.content_hash"},
		},
		Touch: []string{"ingest_time"},
		KeyOf: func(r SARow) string { return r.Key() },
		Merge: MergeSA,
		Values: func(r SARow) []any {
			return []any{r.URLCanonical, r.SourceDomain, r.PublisherTime, r.FirstSeenTime, r.Language,
				r.Title, r.TextNormalized, r.ContentHash, nullSlice(r.Symbols), r.Author, nullSlice(r.TopicTags),
				r.HypeRaw, r.HypeCrowd, r.HypeElitist, r.AccountWeightsApplied}
		},
		KeyValues:  func(r SARow) []any { return []any{r.URLCanonical} },
		AppendCopy: appendSACopy,
	}
}

func nullTime(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t
}

// nullSlice keeps the NULL / '{}' distinction: nil is NULL, an empty
// non-nil slice is an empty array.
func nullSlice(s []string) any {
	if s == nil {
		return nil
	}
	return s
}

// NewSink returns the silver sink: it splits a batch of rows into its
// ta_silver and sa_silver rows, upserts both (concurrently, each in its own
// transactions) and maps rejections back to indexes of the original batch.
// An empty Row (neither TA nor SA) is rejected with rule "silver.empty_row".
// If either table fails with a non-rejection error the whole batch is
// reported as failed (the retry rewrites the other table's rows, which the
// upsert makes harmless). opts apply to both table sinks (e.g.
// pgsink.WithRegisterer: the two sinks' series differ by their table label).
// Safe for concurrent use.
func NewSink(db pgsink.Beginner, opts ...pgsink.Option) (stages.Sink[Row], error) {
	ta, err := pgsink.New(db, TATable(), opts...)
	if err != nil {
		return nil, fmt.Errorf("silver: ta_silver sink: %w", err)
	}
	sa, err := pgsink.New(db, SATable(), opts...)
	if err != nil {
		return nil, fmt.Errorf("silver: sa_silver sink: %w", err)
	}
	return &router{ta: ta, sa: sa}, nil
}

type router struct {
	ta stages.Sink[TARow]
	sa stages.Sink[SARow]
	// mem holds the *rowMemory that Decode carves rows from and that
	// AppendMerged decodes into, one per call at a time (the window's
	// methods run on every partition's worker at once).
	mem rowMemPool
}

// MergeKey and Merge make the silver sink a [run.Merger]: outputs coalesce
// by table and natural key with [MergeTA] / [MergeSA], the same merge the
// upsert applies, so the runtime's coalescing windows write each key once
// per window.
//
// MergeKey is called once per record, so it allocates at most once: an sa
// row's key is its url_canonical as is (no copy); a ta row's is
// "SYMBOL|YYYY-MM-DD". The two cannot collide: a valid url_canonical starts
// with "http://" or "https://" (rule sa.url), a valid symbol is 3–7 capital
// letters (rule ta.symbol). An empty Row has the key "".
func (r *router) MergeKey(row Row) string {
	switch {
	case row.SA != nil:
		return row.SA.URLCanonical
	case row.TA != nil:
		return row.TA.Key()
	}
	return ""
}

// AppendMergeKey appends MergeKey(row) to dst (run.KeyAppender): a window
// then holds each key as a string of its own, not as part of the
// allocation that the strings of the row it came from share.
func (r *router) AppendMergeKey(dst []byte, row Row) []byte {
	switch {
	case row.SA != nil:
		return append(dst, row.SA.URLCanonical...)
	case row.TA != nil:
		return appendTAKey(dst, row.TA)
	}
	return dst
}

// appendTAKey appends r.Key() to dst: the trade date as
// time.Time.AppendFormat(time.DateOnly) writes it, digit by digit for a
// year of four digits.
func appendTAKey(dst []byte, r *TARow) []byte {
	dst = append(append(dst, r.Symbol...), '|')
	y, m, d := r.TradeDate.Date()
	if y < 0 || y > 9999 {
		return r.TradeDate.AppendFormat(dst, time.DateOnly)
	}
	return append(dst, byte('0'+y/1000), byte('0'+y/100%10), byte('0'+y/10%10), byte('0'+y%10), '-',
		byte('0'+m/10), byte('0'+m%10), '-', byte('0'+d/10), byte('0'+d%10))
}

var _ run.KeyAppender[Row] = (*router)(nil)

var _ run.Merger[Row] = (*router)(nil)

// Merge returns the row equivalent to writing old and then next. It
// updates old's row in place (the window owns it, see run.Merger), and a
// nullable value it takes from next is copied into old's own storage for
// that column (or a fresh one when old's is NULL) instead of pointing into
// next's: a merged row then keeps its own allocation alive, not one more
// per record merged into it. (Before, in bench-silver's window, an sa key
// held 1.6 KiB of heap.)
func (r *router) Merge(old, next Row) Row {
	switch {
	case old.TA != nil && next.TA != nil:
		o, n := old.TA, next.TA
		m := MergeTA(*o, *n)
		rehome(&m.VWAP, o.VWAP, n.VWAP)
		rehome(&m.AdjClose, o.AdjClose, n.AdjClose)
		rehome(&m.Source, o.Source, n.Source)
		rehome(&m.ContentHash, o.ContentHash, n.ContentHash)
		*o = m
		return old
	case old.SA != nil && next.SA != nil:
		o, n := old.SA, next.SA
		m := MergeSA(*o, *n)
		rehome(&m.Language, o.Language, n.Language)
		rehome(&m.Title, o.Title, n.Title)
		rehome(&m.TextNormalized, o.TextNormalized, n.TextNormalized)
		rehome(&m.Author, o.Author, n.Author)
		rehome(&m.HypeRaw, o.HypeRaw, n.HypeRaw)
		rehome(&m.HypeCrowd, o.HypeCrowd, n.HypeCrowd)
		rehome(&m.HypeElitist, o.HypeElitist, n.HypeElitist)
		rehome(&m.AccountWeightsApplied, o.AccountWeightsApplied, n.AccountWeightsApplied)
		*o = m
		return old
	}
	return next
}

// rehome makes *dst, when it is next's pointer (the merge took next's
// value), point at old's storage for the column holding that value, or at
// a copy when old had none. old's storage belongs to the window's row alone
// (the validator gives every row its own, and the window owns merged rows).
func rehome[T any](dst **T, old, next *T) {
	if *dst == nil || *dst != next || next == old {
		return
	}
	if old == nil {
		v := *next
		*dst = &v
		return
	}
	*old = *next
	*dst = old
}

func (r *router) Write(ctx context.Context, batch []Row) error {
	nTA := 0
	for _, row := range batch {
		if row.TA != nil {
			nTA++
		}
	}
	var (
		taRows = make([]TARow, 0, nTA)
		saRows = make([]SARow, 0, len(batch)-nTA)
		taIdx  = make([]int, 0, nTA)
		saIdx  = make([]int, 0, len(batch)-nTA)
		rej    []stages.Rejection
	)
	for i, row := range batch {
		switch {
		case row.TA != nil:
			taRows = append(taRows, *row.TA)
			taIdx = append(taIdx, i)
		case row.SA != nil:
			saRows = append(saRows, *row.SA)
			saIdx = append(saIdx, i)
		default:
			rej = append(rej, stages.Rejection{Index: i, Rule: "silver.empty_row", Err: errors.New("silver: row has neither a ta nor an sa value")})
		}
	}
	var taErr, saErr error
	var wg sync.WaitGroup
	if len(taRows) > 0 && len(saRows) > 0 {
		wg.Go(func() { taErr = r.ta.Write(ctx, taRows) })
		saErr = r.sa.Write(ctx, saRows)
		wg.Wait()
	} else if len(taRows) > 0 {
		taErr = r.ta.Write(ctx, taRows)
	} else if len(saRows) > 0 {
		saErr = r.sa.Write(ctx, saRows)
	}
	var failed []error
	for _, part := range []struct {
		err error
		idx []int
	}{{taErr, taIdx}, {saErr, saIdx}} {
		if part.err == nil {
			continue
		}
		var pr *stages.Rejections
		if !errors.As(part.err, &pr) {
			failed = append(failed, part.err)
			continue
		}
		for _, it := range pr.Items {
			it.Index = part.idx[it.Index]
			rej = append(rej, it)
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("silver: write batch of %d: %w", len(batch), errors.Join(failed...))
	}
	if len(rej) == 0 {
		return nil
	}
	sortRejections(rej)
	return &stages.Rejections{Items: rej}
}

func sortRejections(rej []stages.Rejection) {
	slices.SortFunc(rej, func(a, b stages.Rejection) int { return a.Index - b.Index })
}
