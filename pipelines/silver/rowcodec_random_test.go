package silver

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// Random numbers read back bit for bit from their compact encoding:
// decimals of 0–6 places (those of up to 3 in varints, the others in 8
// bytes), of either sign, up to and past 2^40, and arbitrary bit patterns
// (NaN payloads, subnormals, -0).
func TestRowEncodingFloatsRoundTripRandom(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	check := func(f float64) {
		t.Helper()
		var e rowEncoder
		e.float(f)
		d := rowDecoder{b: e.head}
		got := d.float()
		if d.err != nil || d.pos != len(e.head) || math.Float64bits(got) != math.Float64bits(f) {
			t.Fatalf("%v (%x): read %v (%x), err %v", f, math.Float64bits(f), got, math.Float64bits(got), d.err)
		}
		if len(e.head) > 9 {
			t.Fatalf("%v: %d bytes", f, len(e.head))
		}
	}
	for range 200_000 {
		places := rng.IntN(7)
		m := rng.Int64N(1 << uint(1+rng.IntN(52)))
		if rng.IntN(2) == 0 {
			m = -m
		}
		check(float64(m) / math.Pow10(places))
		check(math.Float64frombits(rng.Uint64()))
	}
	for _, f := range []float64{1<<40 - 0.001, -(1<<40 - 0.001), 1 << 40, 1<<40 - 1, 0.0005, 0.0015, 1.0005, -0.001, 0.999, 9007199254740.991,
		math.MaxFloat64, math.SmallestNonzeroFloat64, -math.MaxFloat64, math.Float64frombits(0x7ff8000000000001)} {
		check(f)
	}
}

// Random times read back as the instant, the zone offset and the kind of
// location (UTC, Local, a fixed zone) that MarshalBinary and
// UnmarshalBinary keep, from year -9999 to 9999, every nanosecond count,
// monotonic readings stripped; a zone offset that is not a whole minute
// reads back as the instant in UTC.
func TestRowEncodingTimesRoundTripRandom(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(3, 4))
	lo := time.Date(-9999, 1, 1, 0, 0, 0, 0, time.UTC).Unix()
	hi := time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC).Unix()
	for i := range 100_000 {
		tm := time.Unix(lo+rng.Int64N(hi-lo), rng.Int64N(1e9))
		switch rng.IntN(5) {
		case 0:
			tm = tm.UTC()
		case 1:
			tm = tm.In(time.Local)
		case 2:
			tm = tm.In(time.FixedZone("", (rng.IntN(2*18*60)-18*60)*60))
		case 3:
			tm = tm.In(time.FixedZone("X", rng.IntN(2*18*3600)-18*3600))
		case 4:
			tm = time.Now().Add(time.Duration(rng.Int64N(1 << 50))) // monotonic reading
		}
		_, off := tm.Zone() // Local's offset is not a whole minute before its zone's standard time (LMT)
		whole := off%60 == 0
		var e rowEncoder
		e.time(tm)
		d := rowDecoder{b: e.head}
		got := d.time()
		if d.err != nil || d.pos != len(e.head) || !got.Equal(tm) || got.Nanosecond() != tm.Nanosecond() {
			t.Fatalf("%d: %v: read %v, err %v", i, tm, got, d.err)
		}
		if !whole {
			if got.Location() != time.UTC {
				t.Fatalf("%v: read in %v, want UTC", tm, got.Location())
			}
			continue
		}
		b, err := tm.MarshalBinary()
		if err != nil {
			continue // offset -1 minute: MarshalBinary refuses it, the encoding keeps it
		}
		var want time.Time
		if err := want.UnmarshalBinary(b); err != nil {
			t.Fatal(err)
		}
		wn, wo := want.Zone()
		gn, gotOff := got.Zone()
		if wo != gotOff || wn != gn || (got.Location() == time.UTC) != (want.Location() == time.UTC) ||
			(got.Location() == time.Local) != (want.Location() == time.Local) || got.Format(time.DateOnly) != want.Format(time.DateOnly) {
			t.Fatalf("%v: read %v (%s %+d), want %v (%s %+d)", tm, got, gn, gotOff, want, wn, wo)
		}
	}
}
