package silver

import (
	"math"
	"testing"
	"time"
)

// Numbers and times take fewer bytes than their fixed forms (8 and 16)
// and read back exactly: a float bit for bit (-0, NaN, ±Inf and values
// of many digits included, in their 9-byte form), a time as the instant,
// zone offset and location kind (UTC, Local or a fixed zone) that
// AppendBinary and UnmarshalBinary keep.
func TestRowEncodingCompactNumbersAndTimes(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		f       float64
		maxSize int
	}{
		{0, 1}, {1, 1}, {-1, 1}, {23450, 3}, {23.45, 3}, {-0.5, 1}, {99.99, 3}, {1000, 2}, {0.001, 1},
		{12345678.125, 6}, {1 << 39, 7},
		{math.Copysign(0, -1), 9}, {math.NaN(), 9}, {math.Inf(1), 9}, {math.Inf(-1), 9}, {0.1 + 0.2, 9},
		{1e300, 9}, {5e-324, 9}, {1 << 41, 9}, {math.Pi, 9},
	} {
		var e rowEncoder
		e.float(c.f)
		if len(e.head) > c.maxSize {
			t.Errorf("%v: %d bytes, want ≤ %d", c.f, len(e.head), c.maxSize)
		}
		d := rowDecoder{b: e.head}
		got := d.float()
		if d.err != nil || d.pos != len(e.head) || math.Float64bits(got) != math.Float64bits(c.f) {
			t.Errorf("%v (%x): read %v (%x), err %v, %d of %d bytes", c.f, math.Float64bits(c.f), got, math.Float64bits(got), d.err, d.pos, len(e.head))
		}
	}
	ict := time.FixedZone("ICT", 7*3600)
	for _, c := range []struct {
		t       time.Time
		maxSize int
	}{
		{time.Time{}, 12},
		{time.Date(2025, 6, 2, 0, 0, 0, 0, time.UTC), 6},
		{time.Date(2025, 6, 2, 9, 15, 0, 123000000, time.UTC), 10},
		{time.Date(2025, 6, 2, 9, 15, 0, 999999999, ict), 12},
		{time.Date(2025, 6, 2, 9, 15, 0, 0, time.FixedZone("", -(3*3600+30*60))), 8},
		{time.Date(2025, 6, 2, 9, 15, 0, 0, time.FixedZone("", 0)), 7},
		{time.Date(2025, 6, 2, 9, 15, 0, 1, time.Local), 12},
		{time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC), 12},
		{time.Date(2999, 1, 1, 0, 0, 0, 0, time.UTC), 7},
	} {
		var e rowEncoder
		e.time(c.t)
		if len(e.head) > c.maxSize {
			t.Errorf("%v: %d bytes, want ≤ %d", c.t, len(e.head), c.maxSize)
		}
		d := rowDecoder{b: e.head}
		got := d.time()
		var want time.Time
		b, err := c.t.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		if err := want.UnmarshalBinary(b); err != nil {
			t.Fatal(err)
		}
		wn, wo := want.Zone()
		gn, gotOff := got.Zone()
		if d.err != nil || d.pos != len(e.head) || !got.Equal(want) || gotOff != wo || gn != wn || got.Location() != want.Location() && (got.Location() == time.UTC || want.Location() == time.UTC || got.Location() == time.Local || want.Location() == time.Local) {
			t.Errorf("%v: read %v (%s %+d, %v), want %v (%s %+d, %v); err %v", c.t, got, gn, gotOff, got.Location(), want, wn, wo, want.Location(), d.err)
		}
	}
	// A truncated or out-of-range encoding is an error.
	for _, bad := range [][]byte{{}, {0x80}, {2, 0x80}, {2, 2}, {2, 0xfe, 0xff, 0xff, 0xff, 0x0f}} {
		d := rowDecoder{b: bad}
		if d.time(); d.err == nil {
			t.Errorf("time %x: no error", bad)
		}
	}
	for _, bad := range [][]byte{{}, {0}, {0, 1, 2}, {2}} {
		d := rowDecoder{b: bad}
		if d.float(); d.err == nil {
			t.Errorf("float %x: no error", bad)
		}
	}
}
