package silver

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"time"
)

// corpusRows returns the rows of a generated corpus without invalid
// records (seed, n records over keys keys), in corpus order.
func corpusRows(t testing.TB, seed int64, n, keys int) []Row {
	t.Helper()
	return corpusRowsOf(t, GenerateCorpus(seed, n, 0, CorpusKeys(keys)))
}

// corpusRowsOf returns the rows the stage (its real clock) makes of valid
// corpus records recs, in order.
func corpusRowsOf(t testing.TB, recs []Record) []Row {
	t.Helper()
	v := NewValidator()
	var rows []Row
	for _, rec := range recs {
		env, err := Decode([]byte(rec.Key), rec.Value)
		if err != nil {
			t.Fatal(err)
		}
		row, err := v.Transform(env, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		rows = append(rows, row)
	}
	return rows
}

// AppendMerged (the window's merge of a row into an encoded one) produces
// exactly the bytes of decoding the old row, merging with Merge and
// encoding the result, for every merge of a corpus folded per key, and
// leaves old unchanged.
func TestAppendMergedEqualsDecodeMergeEncode(t *testing.T) {
	t.Parallel()
	var rt router
	enc := map[string][]byte{}
	merges := 0
	for _, row := range corpusRows(t, 11, 4000, 50) {
		k := rt.MergeKey(row)
		old, ok := enc[k]
		if !ok {
			enc[k] = rt.AppendEncoded(nil, row)
			continue
		}
		before := bytes.Clone(old)
		got, err := rt.AppendMerged([]byte("prefix"), old, row)
		if err != nil {
			t.Fatal(err)
		}
		prev, err := rt.Decode(old)
		if err != nil {
			t.Fatal(err)
		}
		want := rt.AppendEncoded([]byte("prefix"), rt.Merge(prev, row))
		if !bytes.Equal(got, want) {
			t.Fatalf("key %s: AppendMerged gave %q, want %q", k, got, want)
		}
		if !bytes.Equal(old, before) {
			t.Fatalf("key %s: AppendMerged modified old", k)
		}
		enc[k] = got[len("prefix"):]
		merges++
	}
	if merges < 3000 {
		t.Fatalf("only %d merges: the corpus does not repeat keys", merges)
	}
}

// Rows of different kinds (which never share a key) and an empty row
// merge as Merge does: next wins; a corrupt encoding is an error.
func TestAppendMergedOtherKindsAndCorrupt(t *testing.T) {
	t.Parallel()
	var rt router
	var ta, sa Row
	for _, row := range corpusRows(t, 11, 50, 10) {
		if row.TA != nil && ta.TA == nil {
			ta = row
		}
		if row.SA != nil && sa.SA == nil {
			sa = row
		}
	}
	if ta.TA == nil || sa.SA == nil {
		t.Fatal("the corpus has no ta or no sa row")
	}
	for _, c := range []struct{ old, next Row }{{ta, sa}, {sa, ta}, {Row{}, ta}, {sa, Row{}}} {
		got, err := rt.AppendMerged(nil, rt.AppendEncoded(nil, c.old), c.next)
		if err != nil {
			t.Fatal(err)
		}
		if want := rt.AppendEncoded(nil, c.next); !bytes.Equal(got, want) {
			t.Errorf("merge of %s into %s: %q, want next's encoding %q", c.next.Key(), c.old.Key(), got, want)
		}
	}
	for _, old := range [][]byte{nil, {rowTA, 3}, {rowSA}, {9}} {
		next := ta
		if len(old) > 0 && old[0] == rowSA {
			next = sa
		}
		if _, err := rt.AppendMerged(nil, old, next); !errors.Is(err, errCorruptRow) {
			t.Errorf("AppendMerged of corrupt %q: %v, want errCorruptRow", old, err)
		}
	}
}

// BenchmarkWindowFold folds a corpus's rows per key the way a window that
// holds encodings does: into a scratch buffer with AppendMerged, or with
// Decode, Merge and AppendEncoded (sub-benchmark "decode"), then copied
// over the key's encoding.
func BenchmarkWindowFold(b *testing.B) {
	rows := corpusRows(b, 11, 20000, 2000)
	var rt router
	for _, mode := range []string{"appendmerged", "decode"} {
		b.Run(mode, func(b *testing.B) {
			b.ReportAllocs()
			var scratch []byte
			for b.Loop() {
				enc := map[string][]byte{}
				for _, row := range rows {
					k := rt.MergeKey(row)
					old, ok := enc[k]
					if !ok {
						enc[k] = rt.AppendEncoded(nil, row)
						continue
					}
					if mode == "decode" {
						prev, err := rt.Decode(old)
						if err != nil {
							b.Fatal(err)
						}
						scratch = rt.AppendEncoded(scratch[:0], rt.Merge(prev, row))
					} else {
						var err error
						if scratch, err = rt.AppendMerged(scratch[:0], old, row); err != nil {
							b.Fatal(err)
						}
					}
					enc[k] = append(old[:0], scratch...)
				}
			}
		})
	}
}

// The stage's rows own their strings (copied out of the record into
// memory of the stage's): overwriting the record's bytes afterwards, as a
// reused fetch buffer would, changes no row.
func TestRowsOwnTheirStrings(t *testing.T) {
	t.Parallel()
	var rt router
	recs := GenerateCorpus(13, 400, 0, CorpusKeys(50))
	rows := corpusRowsOf(t, recs)
	var want []Row
	for _, row := range rows {
		c, err := rt.Decode(rt.AppendEncoded(nil, row)) // a deep copy
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, c)
	}
	for _, rec := range recs {
		for i := range rec.Value {
			rec.Value[i] = 'X'
		}
	}
	for i := range rows {
		if d := sameRow(rows[i], want[i]); d != "" {
			t.Fatalf("row %d: %s changed with the record's bytes", i, d)
		}
	}
}

// Arrays with more elements than the decoder keeps lengths for without
// allocating (with the '{}' and NULL arrays) decode as encoded.
func TestRowEncodingLongArrays(t *testing.T) {
	t.Parallel()
	var rt router
	for _, arrays := range [][2][]string{
		{{"AAA", "BBB"}, make([]string, 30)},
		{make([]string, 16), {"x"}},
		{{}, nil},
		{nil, make([]string, 17)},
	} {
		row := Row{SA: &SARow{URLCanonical: "https://e.x/a", Symbols: arrays[0], TopicTags: arrays[1]}}
		for i := range row.SA.TopicTags {
			row.SA.TopicTags[i] = fmt.Sprint("tag", i)
		}
		got, err := rt.Decode(rt.AppendEncoded(nil, row))
		if err != nil {
			t.Fatal(err)
		}
		if d := sameRow(got, row); d != "" {
			t.Errorf("%d symbols, %d tags: %s differs", len(arrays[0]), len(arrays[1]), d)
		}
	}
}
