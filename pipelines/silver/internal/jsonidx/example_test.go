package jsonidx_test

import (
	"errors"
	"fmt"

	"github.com/sluicehq/sluice/pipelines/silver/internal/jsonidx"
)

// Indexing an envelope and its payload in one pass, then decoding the
// values that were located. The sets of names are built once and shared.
func ExampleIndex() {
	envelope := jsonidx.NewNames("task_type", "payload")
	fields := jsonidx.NewNames("symbol", "close", "volume", "traded_at")
	value := []byte(`{"task_type":"ta.bar","payload":{"symbol":"VNM","close":61200.5,"volume":1.2e6,` +
		`"traded_at":"2025-05-30T14:45:00.1234567+07:00","note":"not indexed"}}`)

	var top [2]jsonidx.Span
	var spans [4]jsonidx.Span
	payload := jsonidx.Nested{Member: envelope.Index([]byte("payload")), Names: fields, Spans: spans[:]}
	start, err := jsonidx.Index(value, envelope, top[:], &payload)
	if err != nil {
		fmt.Println(err)
		return
	}
	taskType, _ := top[0].Value(value[start:])
	p, _ := top[1].Value(value[start:]) // what payload's spans locate in
	sym, _ := spans[0].Value(p)
	closePrice, _ := spans[1].Value(p)
	volume, _ := spans[2].Value(p)
	at, _ := spans[3].Value(p)

	tt, _ := jsonidx.StringBytes(taskType) // no copy: a sub-slice of value
	s, _ := jsonidx.DecodeString(sym)
	c, _ := jsonidx.ParseFloat(closePrice)
	v, _ := jsonidx.ParseInt(volume) // 1.2e6 is an integer
	t, _ := jsonidx.ParseTime(at)    // truncated to microseconds
	fmt.Printf("%s: %s close=%v volume=%d at %s\n", tt, s, c, v, t.UTC().Format("2006-01-02 15:04:05.000000"))
	fmt.Println("payload indexed in the same pass:", payload.Size == len(p), jsonidx.KindOf(p))

	// Output:
	// ta.bar: VNM close=61200.5 volume=1200000 at 2025-05-30 07:45:00.123456
	// payload indexed in the same pass: true object
}

// What the decoders refuse: strings that are not text, numbers of the
// wrong form, JSON that is not an object.
func Example_refusals() {
	_, err := jsonidx.DecodeString([]byte(`"half a pair: \ud83d"`))
	fmt.Println(errors.Is(err, jsonidx.ErrInvalidText), err)
	_, err = jsonidx.StringBytes([]byte("\"\xff\""))
	fmt.Println(errors.Is(err, jsonidx.ErrInvalidText), err)

	_, err = jsonidx.ParseInt([]byte("1.5"))
	fmt.Println(err)
	_, err = jsonidx.ParseInt([]byte("1e19"))
	fmt.Println(err)
	_, err = jsonidx.ParseFloat([]byte("1e400"))
	fmt.Println(err)
	_, err = jsonidx.ParseTime([]byte(`"2025-05-30T14:45:00,5Z"`))
	fmt.Println(err != nil)

	_, err = jsonidx.Index([]byte(`[1,2]`), nil, nil, nil)
	fmt.Println(errors.Is(err, jsonidx.ErrNotObject), err)
	_, err = jsonidx.Index([]byte(`{"a":01}`), nil, nil, nil)
	fmt.Println(err)

	// Output:
	// true not valid UTF-8 text: \uD83D is half of a surrogate pair
	// true not valid UTF-8 text: invalid UTF-8
	// not an integer
	// out of range for BIGINT
	// out of range for DOUBLE PRECISION
	// true
	// true not a JSON object: array
	// invalid character '1' at offset 6: after object key:value pair
}
