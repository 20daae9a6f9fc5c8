package silver

import (
	"reflect"
	"testing"
	"time"
)

// sameRow reports where two rows differ, comparing times by instant and
// zone offset (what the columns store: timestamptz the instant, a date
// the day in the time's zone), everything else exactly ("" when equal).
func sameRow(a, b Row) string {
	switch {
	case (a.TA == nil) != (b.TA == nil) || (a.SA == nil) != (b.SA == nil):
		return "different tables"
	case a.TA != nil:
		return sameFields(reflect.ValueOf(*a.TA), reflect.ValueOf(*b.TA))
	case a.SA != nil:
		return sameFields(reflect.ValueOf(*a.SA), reflect.ValueOf(*b.SA))
	}
	return ""
}

func sameFields(a, b reflect.Value) string {
	for i := range a.NumField() {
		x, y := a.Field(i).Interface(), b.Field(i).Interface()
		if tx, ok := x.(time.Time); ok {
			ty := y.(time.Time)
			_, ox := tx.Zone()
			_, oy := ty.Zone()
			if !tx.Equal(ty) || ox != oy {
				return a.Type().Field(i).Name + ": " + tx.String() + " vs " + ty.String()
			}
			continue
		}
		if !reflect.DeepEqual(x, y) {
			return a.Type().Field(i).Name
		}
	}
	return ""
}

// Every row decodes to itself: the corpus's rows and rows with every
// nullable column NULL or set, empty and NULL arrays, zero times, times in
// other zones and the empty row (which the sink rejects).
func TestRowEncodingRoundTrip(t *testing.T) {
	t.Parallel()
	var rt router
	v := NewValidator()
	var rows []Row
	for _, rec := range GenerateCorpus(11, 3000, 0.2) {
		env, err := Decode([]byte(rec.Key), rec.Value)
		if err != nil {
			continue
		}
		if row, err := v.Transform(env, time.Time{}); err == nil {
			rows = append(rows, row)
		}
	}
	hcm := time.FixedZone("ICT", 7*3600)
	odd := time.FixedZone("", -(3*3600 + 30*60))
	rows = append(rows,
		Row{},
		Row{TA: &TARow{Symbol: "VNM", TradeDate: time.Date(2025, 6, 2, 0, 0, 0, 0, time.UTC)}},
		Row{TA: &TARow{Symbol: "FPT", TradeDate: time.Date(2025, 6, 2, 0, 0, 0, 0, hcm), Open: -0.5, High: 1e300, Volume: -7,
			VWAP: ptr(0.0), AdjClose: ptr(-1.25), Currency: "", PriceMultiplier: 1000, Source: ptr(""),
			FirstSeenTime: time.Date(2025, 6, 2, 9, 15, 0, 123456789, odd), IngestTime: time.Now(), ContentHash: ptr("ü∑")}},
		Row{SA: &SARow{URLCanonical: "https://a.vn/x", SourceDomain: "a.vn"}},
		Row{SA: &SARow{URLCanonical: "https://a.vn/é", SourceDomain: "", PublisherTime: time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC),
			FirstSeenTime: time.Date(2025, 6, 1, 23, 0, 0, 1, hcm), Language: ptr(LanguageUnknown), Title: ptr(""), TextNormalized: ptr("x\x00y"),
			ContentHash: "h", Symbols: []string{}, Author: ptr("a"), TopicTags: []string{"", "macro"},
			HypeRaw: ptr(-0.0), HypeCrowd: ptr(2.5), HypeElitist: nil, AccountWeightsApplied: ptr(false)}},
		Row{SA: &SARow{URLCanonical: "https://b.vn/", Symbols: []string{"VNM", "FPT"}, TopicTags: nil, AccountWeightsApplied: ptr(true)}},
	)
	var buf []byte
	for i, row := range rows {
		buf = rt.AppendEncoded(buf[:0], row)
		got, err := rt.Decode(buf)
		if err != nil {
			t.Fatalf("row %d: decode: %v", i, err)
		}
		if d := sameRow(got, row); d != "" {
			t.Fatalf("row %d %+v: decoded %+v; differs in %s", i, row, got, d)
		}
		// The decoded row owns its memory: the window reuses the bytes.
		clear(buf)
		if d := sameRow(got, row); d != "" {
			t.Fatalf("row %d: the decoded row changed with the encoding's bytes (%s)", i, d)
		}
	}
	for _, bad := range [][]byte{nil, {9}, {rowSA}, {rowTA, 200}, rt.AppendEncoded(nil, rows[0])[:10]} {
		if _, err := rt.Decode(bad); err == nil {
			t.Errorf("Decode(%v) accepted a corrupt encoding", bad)
		}
	}
}

// A key folded the way a window that holds encodings folds it (decode the
// merged row, Merge the next one into it, encode again) ends as the fold
// of MergeTA/MergeSA over its rows in order.
func TestEncodedFoldEqualsMerge(t *testing.T) {
	t.Parallel()
	var rt router
	window := map[string][]byte{}
	model := map[string]Row{}
	for _, row := range corpusRows(t, 7, 3000, 40) {
		k := rt.MergeKey(row)
		switch m, ok := model[k]; {
		case !ok && row.TA != nil:
			c := cloneTA(*row.TA)
			model[k] = Row{TA: &c}
		case !ok:
			c := cloneSA(*row.SA)
			model[k] = Row{SA: &c}
		case row.TA != nil:
			c := MergeTA(*m.TA, cloneTA(*row.TA))
			model[k] = Row{TA: &c}
		default:
			c := MergeSA(*m.SA, cloneSA(*row.SA))
			model[k] = Row{SA: &c}
		}
		old, ok := window[k]
		if !ok {
			window[k] = rt.AppendEncoded(nil, row)
			continue
		}
		prev, err := rt.Decode(old)
		if err != nil {
			t.Fatal(err)
		}
		window[k] = rt.AppendEncoded(old[:0], rt.Merge(prev, row))
	}
	if len(window) != len(model) || len(window) > 100 {
		t.Fatalf("%d keys in the window, %d in the model", len(window), len(model))
	}
	for k, enc := range window {
		got, err := rt.Decode(enc)
		if err != nil {
			t.Fatal(err)
		}
		if d := sameRow(got, model[k]); d != "" {
			t.Errorf("key %s: %s differs: %+v, want %+v", k, d, got, model[k])
		}
	}
}
