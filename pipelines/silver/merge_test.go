package silver

import (
	"math/rand/v2"
	"reflect"
	"testing"
	"time"
)

func ts(h int) time.Time { return time.Date(2025, 6, 1, h, 0, 0, 0, time.UTC) }

func TestMergeTA(t *testing.T) {
	t.Parallel()
	day := time.Date(2025, 6, 2, 0, 0, 0, 0, time.UTC)
	old := TARow{Symbol: "VNM", TradeDate: day, Open: 1, High: 2, Low: 0.5, Close: 1.5, Volume: 10,
		VWAP: ptr(1.2), AdjClose: ptr(1.4), Currency: "VND", PriceMultiplier: 1, Source: ptr("hose"),
		FirstSeenTime: ts(5), ContentHash: ptr("h-old")}
	next := TARow{Symbol: "VNM", TradeDate: day, Open: 3, High: 4, Low: 2, Close: 3.5, Volume: 20,
		Currency: "USD", PriceMultiplier: 1000, FirstSeenTime: ts(7)}
	cases := []struct {
		name      string
		old, next TARow
		want      TARow
	}{
		{
			name: "values from newest, NULLs included; first seen earliest (old)",
			old:  old, next: next,
			want: TARow{Symbol: "VNM", TradeDate: day, Open: 3, High: 4, Low: 2, Close: 3.5, Volume: 20,
				Currency: "USD", PriceMultiplier: 1000, FirstSeenTime: ts(5)},
		},
		{
			name: "first seen earliest (new)",
			old:  old, next: func() TARow { n := next; n.FirstSeenTime = ts(1); return n }(),
			want: func() TARow { n := next; n.FirstSeenTime = ts(1); return n }(),
		},
		{
			name: "stored first seen NULL",
			old:  func() TARow { o := old; o.FirstSeenTime = time.Time{}; return o }(), next: next,
			want: next,
		},
		{
			name: "new first seen NULL keeps stored",
			old:  old, next: func() TARow { n := next; n.FirstSeenTime = time.Time{}; return n }(),
			want: func() TARow { n := next; n.FirstSeenTime = ts(5); return n }(),
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := MergeTA(tc.old, tc.next)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("MergeTA =\n%+v\nwant\n%+v", got, tc.want)
			}
		})
	}
}

func TestMergeSA(t *testing.T) {
	t.Parallel()
	base := SARow{URLCanonical: "https://a/x", SourceDomain: "a", PublisherTime: ts(5), FirstSeenTime: ts(6),
		Language: ptr("vi"), Title: ptr("t-old"), TextNormalized: ptr("x-old"), ContentHash: "h-old",
		Symbols: []string{"VNM"}, Author: ptr("au-old"), TopicTags: []string{"macro"},
		HypeRaw: ptr(1.0), HypeCrowd: ptr(2.0), HypeElitist: ptr(3.0), AccountWeightsApplied: ptr(true)}
	bare := SARow{URLCanonical: "https://a/x", SourceDomain: "b", PublisherTime: ts(9), FirstSeenTime: ts(9), ContentHash: "h-new"}
	with := func(r SARow, f func(*SARow)) SARow { f(&r); return r }
	cases := []struct {
		name      string
		old, next SARow
		want      SARow
	}{
		{
			name: "all-NULL enrichment keeps stored; hash new; domain and earliest times kept",
			old:  base, next: bare,
			want: with(base, func(r *SARow) { r.ContentHash = "h-new" }),
		},
		{
			name: "earlier times in the new record win",
			old:  base, next: with(bare, func(r *SARow) { r.PublisherTime, r.FirstSeenTime = ts(1), ts(2) }),
			want: with(base, func(r *SARow) { r.ContentHash = "h-new"; r.PublisherTime, r.FirstSeenTime = ts(1), ts(2) }),
		},
		{
			name: "enrichment takes every non-NULL new value, false included",
			old:  base,
			next: with(bare, func(r *SARow) {
				r.Language, r.Title, r.TextNormalized, r.Author = ptr("en"), ptr("t-new"), ptr("x-new"), ptr("au-new")
				r.HypeRaw, r.HypeCrowd, r.HypeElitist, r.AccountWeightsApplied = ptr(0.0), ptr(-1.0), ptr(9.0), ptr(false)
				r.Symbols, r.TopicTags = []string{"FPT", "HPG"}, []string{"bank"}
			}),
			want: with(base, func(r *SARow) {
				r.ContentHash = "h-new"
				r.Language, r.Title, r.TextNormalized, r.Author = ptr("en"), ptr("t-new"), ptr("x-new"), ptr("au-new")
				r.HypeRaw, r.HypeCrowd, r.HypeElitist, r.AccountWeightsApplied = ptr(0.0), ptr(-1.0), ptr(9.0), ptr(false)
				r.Symbols, r.TopicTags = []string{"FPT", "HPG"}, []string{"bank"}
			}),
		},
		{
			name: "new unknown language never replaces a known one",
			old:  base, next: with(bare, func(r *SARow) { r.Language = ptr(LanguageUnknown) }),
			want: with(base, func(r *SARow) { r.ContentHash = "h-new" }),
		},
		{
			name: "new unknown language fills a NULL one",
			old:  with(base, func(r *SARow) { r.Language = nil }), next: with(bare, func(r *SARow) { r.Language = ptr(LanguageUnknown) }),
			want: with(base, func(r *SARow) { r.ContentHash = "h-new"; r.Language = ptr(LanguageUnknown) }),
		},
		{
			name: "known language replaces unknown",
			old:  with(base, func(r *SARow) { r.Language = ptr(LanguageUnknown) }), next: with(bare, func(r *SARow) { r.Language = ptr("vi") }),
			want: with(base, func(r *SARow) { r.ContentHash = "h-new"; r.Language = ptr("vi") }),
		},
		{
			name: "empty arrays keep stored arrays",
			old:  base, next: with(bare, func(r *SARow) { r.Symbols, r.TopicTags = []string{}, []string{} }),
			want: with(base, func(r *SARow) { r.ContentHash = "h-new" }),
		},
		{
			name: "empty array over NULL stays NULL",
			old:  with(base, func(r *SARow) { r.Symbols = nil }), next: with(bare, func(r *SARow) { r.Symbols = []string{} }),
			want: with(base, func(r *SARow) { r.ContentHash = "h-new"; r.Symbols = nil }),
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := MergeSA(tc.old, tc.next)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("MergeSA =\n%+v\nwant\n%+v", got, tc.want)
			}
		})
	}
}

// randSA draws a row from small domains so that every branch of MergeSA is
// exercised.
func randSA(r *rand.Rand) SARow {
	pick := func(vals ...string) *string {
		i := r.IntN(len(vals) + 1)
		if i == len(vals) {
			return nil
		}
		return &vals[i]
	}
	arr := func() []string {
		switch r.IntN(3) {
		case 0:
			return nil
		case 1:
			return []string{}
		}
		return []string{string(rune('A'+r.IntN(3))) + "AA"}
	}
	f := func() *float64 {
		if r.IntN(2) == 0 {
			return nil
		}
		v := float64(r.IntN(3))
		return &v
	}
	var b *bool
	if r.IntN(3) > 0 {
		v := r.IntN(2) == 0
		b = &v
	}
	return SARow{
		URLCanonical: "u", SourceDomain: []string{"a", "b"}[r.IntN(2)], PublisherTime: ts(r.IntN(4)), FirstSeenTime: ts(r.IntN(4)),
		Language: pick("vi", "en", LanguageUnknown), Title: pick("t1", "t2"), TextNormalized: pick("x1", "x2"),
		ContentHash: []string{"h1", "h2"}[r.IntN(2)], Symbols: arr(), Author: pick("a1"), TopicTags: arr(),
		HypeRaw: f(), HypeCrowd: f(), HypeElitist: f(), AccountWeightsApplied: b,
	}
}

// TestMergeAssociative proves that merging a batch in memory before the
// upsert gives the same row as applying its records one by one:
// merge(merge(s, a), b) == merge(s, merge(a, b)).
func TestMergeAssociative(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 20000; i++ {
		s, a, b := randSA(r), randSA(r), randSA(r)
		left := MergeSA(MergeSA(s, a), b)
		right := MergeSA(s, MergeSA(a, b))
		if !reflect.DeepEqual(left, right) {
			t.Fatalf("not associative:\ns=%+v\na=%+v\nb=%+v\nleft=%+v\nright=%+v", s, a, b, left, right)
		}
		ta := func(h int, v float64) TARow {
			return TARow{Symbol: "X", Open: v, FirstSeenTime: ts(h)}
		}
		x, y, z := ta(r.IntN(4), 1), ta(r.IntN(4), 2), ta(r.IntN(4), 3)
		if MergeTA(MergeTA(x, y), z) != MergeTA(x, MergeTA(y, z)) {
			t.Fatalf("MergeTA not associative: %+v %+v %+v", x, y, z)
		}
	}
}

// The sink's run.Merger folds a key's rows exactly like MergeTA/MergeSA
// applied in order, although it updates the window's row in place.
func TestRouterMergeFoldsInOrder(t *testing.T) {
	t.Parallel()
	var r router
	corpus := corpusRows(t, 7, 3000, 40)
	window := map[string]Row{}
	wantTA := map[string]TARow{}
	wantSA := map[string]SARow{}
	for _, row := range corpus {
		// The model works on deep copies: Merge writes into the window
		// row's storage, which the first row of a key shares.
		switch {
		case row.TA != nil:
			c := cloneTA(*row.TA)
			if old, ok := wantTA[r.MergeKey(row)]; ok {
				c = MergeTA(old, c)
			}
			wantTA[r.MergeKey(row)] = c
		case row.SA != nil:
			c := cloneSA(*row.SA)
			if old, ok := wantSA[r.MergeKey(row)]; ok {
				c = MergeSA(old, c)
			}
			wantSA[r.MergeKey(row)] = c
		}
		k := r.MergeKey(row)
		old, ok := window[k]
		if !ok {
			window[k] = row
			continue
		}
		m := r.Merge(old, row)
		window[k] = m
		// The merged row points into no storage of the record merged
		// into it, so that record's allocation is not kept alive.
		for i, p := range pointers(m) {
			if !reflect.ValueOf(p).IsNil() && p == pointers(row)[i] {
				t.Fatalf("key %s: merged row's nullable column %d points into the incoming row's storage", k, i)
			}
		}
	}
	for k, row := range window {
		if row.TA != nil && k != row.TA.Key() || row.SA != nil && k != row.SA.Key() {
			t.Fatalf("MergeKey %q for row %+v", k, row)
		}
	}
	if len(window) != len(wantTA)+len(wantSA) || len(window) >= len(corpus) {
		t.Fatalf("%d keys in the window, want %d (< %d records)", len(window), len(wantTA)+len(wantSA), len(corpus))
	}
	for k, row := range window {
		switch {
		case row.TA != nil:
			if !reflect.DeepEqual(*row.TA, wantTA[k]) {
				t.Fatalf("key %s: %+v, want %+v", k, *row.TA, wantTA[k])
			}
		case row.SA != nil:
			if !reflect.DeepEqual(*row.SA, wantSA[k]) {
				t.Fatalf("key %s: %+v, want %+v", k, *row.SA, wantSA[k])
			}
		}
	}
}

func cloneTA(r TARow) TARow {
	r.VWAP, r.AdjClose, r.Source, r.ContentHash = clonePtr(r.VWAP), clonePtr(r.AdjClose), clonePtr(r.Source), clonePtr(r.ContentHash)
	return r
}

func cloneSA(r SARow) SARow {
	r.Language, r.Title, r.TextNormalized, r.Author = clonePtr(r.Language), clonePtr(r.Title), clonePtr(r.TextNormalized), clonePtr(r.Author)
	r.HypeRaw, r.HypeCrowd, r.HypeElitist = clonePtr(r.HypeRaw), clonePtr(r.HypeCrowd), clonePtr(r.HypeElitist)
	r.AccountWeightsApplied = clonePtr(r.AccountWeightsApplied)
	return r
}

func clonePtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}

// pointers returns the addresses held by a row's nullable columns.
func pointers(r Row) []any {
	switch {
	case r.TA != nil:
		return []any{r.TA.VWAP, r.TA.AdjClose, r.TA.Source, r.TA.ContentHash}
	case r.SA != nil:
		return []any{r.SA.Language, r.SA.Title, r.SA.TextNormalized, r.SA.Author, r.SA.HypeRaw, r.SA.HypeCrowd, r.SA.HypeElitist, r.SA.AccountWeightsApplied}
	}
	return nil
}
