package jsonidx

import "testing"

// TestNoAllocs holds the package doc's claims of what does not allocate.
func TestNoAllocs(t *testing.T) {
	envelope := NewNames("task_type", "payload")
	fields := NewNames("symbol", "text", "close", "volume", "at", "day", "tags", "account_weights_applied")
	value := []byte(` {"task_type":"ta.bar","payload":{"symbol":"VNM","text":"Thị trường","close":61200.5,"volume":1200000,` +
		`"at":"2025-05-30T14:45:00.123Z","day":"2025-05-30","tags":["a",null,{"x":[1e3]}],"account_weights_applied":true,"other":null}} `)
	var top [2]Span
	var spans [8]Span
	var sink int
	allocs := testing.AllocsPerRun(100, func() {
		top, spans = [2]Span{}, [8]Span{}
		nested := Nested{Member: 1, Names: fields, Spans: spans[:]}
		start, err := Index(value, envelope, top[:], &nested)
		if err != nil {
			t.Fatal(err)
		}
		p, _ := top[1].Value(value[start:])
		raw := func(k int) []byte {
			v, _ := spans[k].Value(p)
			v, ok := Present(v)
			if !ok {
				t.Fatalf("field %d absent", k)
			}
			return v
		}
		s, err1 := StringBytes(raw(1))
		f, err2 := ParseFloat(raw(2))
		n, err3 := ParseInt(raw(3))
		tm, err4 := ParseTime(raw(4))
		d, err5 := StringBytes(raw(5))
		day, ok := ParseDate(d)
		if err1 != nil || err2 != nil || err3 != nil || err4 != nil || err5 != nil || !ok {
			t.Fatal(err1, err2, err3, err4, err5, ok)
		}
		for e := range Elements(raw(6)) {
			sink += int(KindOf(e))
		}
		sink += len(s) + int(f) + int(n) + tm.Nanosecond() + day.Day() + RuneCount(s) + fields.Index([]byte("account_weights_applied"))
	})
	if allocs != 0 {
		t.Errorf("%v allocations per run, want 0", allocs)
	}
	if sink == 0 {
		t.Fatal("nothing decoded")
	}
}
