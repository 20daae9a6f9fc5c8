package silver

import (
	"errors"
	"testing"
	"time"
)

// The key read from a row's encoding is the row's MergeKey, for the
// corpus's rows as encoded and as merged into earlier rows of their key
// (the window compares keys this way); an empty row's key is ""; a corrupt
// encoding is an error.
func TestAppendEncodedKeyIsMergeKey(t *testing.T) {
	t.Parallel()
	var rt router
	enc := map[string][]byte{}
	kinds := map[string]int{}
	for _, row := range corpusRows(t, 17, 3000, 200) {
		k := rt.MergeKey(row)
		var e []byte
		if old, ok := enc[k]; ok {
			var err error
			if e, err = rt.AppendMerged(nil, old, row); err != nil {
				t.Fatal(err)
			}
			kinds["merged"]++
		} else {
			e = rt.AppendEncoded(nil, row)
		}
		enc[k] = e
		got, err := rt.AppendEncodedKey([]byte("x"), e)
		if err != nil {
			t.Fatalf("key %s: %v", k, err)
		}
		if string(got) != "x"+k {
			t.Fatalf("AppendEncodedKey gave %q, want %q", got, "x"+k)
		}
		if row.TA != nil {
			kinds["ta"]++
		} else {
			kinds["sa"]++
		}
	}
	if kinds["ta"] == 0 || kinds["sa"] == 0 || kinds["merged"] < 1000 {
		t.Fatalf("rows checked: %v, want ta, sa and merged ones", kinds)
	}
	if got, err := rt.AppendEncodedKey(nil, rt.AppendEncoded(nil, Row{})); err != nil || len(got) != 0 {
		t.Errorf("empty row: key %q, %v; want \"\"", got, err)
	}
	// Truncated encodings: an error or a prefix of the key, never a panic
	// or a read past the end.
	checked := 0
	for k, e := range enc {
		for i := range len(e) {
			got, err := rt.AppendEncodedKey(nil, e[:i])
			if err == nil && len(got) > len(k) {
				t.Fatalf("key %s truncated to %d bytes: key %q", k, i, got)
			}
		}
		if checked++; checked == 20 {
			break
		}
	}
	for _, bad := range [][]byte{nil, {rowTA, 3}, {rowSA}, {rowSA, 200}, {9}} {
		if _, err := rt.AppendEncodedKey(nil, bad); !errors.Is(err, errCorruptRow) {
			t.Errorf("AppendEncodedKey(%q): %v, want errCorruptRow", bad, err)
		}
	}
}

// A ta row's key spells its trade date as time.DateOnly does, in the
// date's own zone, for years of four digits and beyond.
func TestTAKeyDate(t *testing.T) {
	t.Parallel()
	ict := time.FixedZone("ICT", 7*3600)
	for _, d := range []time.Time{
		time.Date(2025, 5, 30, 0, 0, 0, 0, time.UTC), time.Date(1900, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC), time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(-1, 12, 31, 0, 0, 0, 0, time.UTC),
		time.Date(7, 7, 7, 0, 0, 0, 0, time.UTC), {}, time.Date(2025, 5, 30, 23, 0, 0, 0, ict),
		time.Date(2025, 5, 30, 23, 0, 0, 0, time.UTC).In(ict),
	} {
		r := TARow{Symbol: "VNM", TradeDate: d}
		if got, want := r.Key(), "VNM|"+d.Format(time.DateOnly); got != want {
			t.Errorf("Key of %v = %q, want %q", d, got, want)
		}
	}
}
