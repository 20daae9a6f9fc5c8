package run

import (
	"encoding/binary"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"
)

// heldOverhead is what a held dead letter counts in the memory budget
// besides its packed bytes: the slice header and its labels.
const heldOverhead = 64

// hold packs the dead letters dlq (of the DLQ topic) into h and returns
// the bytes they count in the memory budget. A dead letter held packed is
// one allocation of its key, value and headers instead of a record and a
// dozen header values: about half the memory for silver's dead letters,
// which a window holding thousands of them leaves to the windows.
func (h *heldDLQ) hold(dlq []*kgo.Record, labels [][2]string) int64 {
	n := int64(0)
	for _, rec := range dlq {
		b := packDeadLetter(rec)
		h.dlq = append(h.dlq, b)
		n += int64(len(b)) + heldOverhead
	}
	h.labels = append(h.labels, labels...)
	h.bytes += n
	return n
}

// records returns the held dead letters as records of topic.
func (h *heldDLQ) records(topic string) ([]*kgo.Record, error) {
	recs := make([]*kgo.Record, len(h.dlq))
	for i, b := range h.dlq {
		rec, err := unpackDeadLetter(b)
		if err != nil {
			return nil, err
		}
		rec.Topic = topic
		recs[i] = rec
	}
	return recs, nil
}

// packDeadLetter encodes rec's key, value and headers (not its topic) in
// one byte slice: each as a uvarint of its length plus one (0: nil) and
// its bytes, the headers preceded by their count.
func packDeadLetter(rec *kgo.Record) []byte {
	size := len(rec.Key) + len(rec.Value) + 3*binary.MaxVarintLen32
	for _, hd := range rec.Headers {
		size += len(hd.Key) + len(hd.Value) + 2*binary.MaxVarintLen32
	}
	b := make([]byte, 0, size)
	b = appendNullable(b, rec.Key, rec.Key == nil)
	b = appendNullable(b, rec.Value, rec.Value == nil)
	b = binary.AppendUvarint(b, uint64(len(rec.Headers)))
	for _, hd := range rec.Headers {
		b = appendNullable(b, []byte(hd.Key), false)
		b = appendNullable(b, hd.Value, hd.Value == nil)
	}
	return b
}

func appendNullable(b, v []byte, null bool) []byte {
	if null {
		return binary.AppendUvarint(b, 0)
	}
	return append(binary.AppendUvarint(b, uint64(len(v))+1), v...)
}

// unpackDeadLetter decodes a packDeadLetter encoding; the record's key,
// value and header values refer to b.
func unpackDeadLetter(b []byte) (*kgo.Record, error) {
	next := func() ([]byte, error) {
		n, k := binary.Uvarint(b)
		if k <= 0 || (n > 0 && uint64(len(b)-k) < n-1) {
			return nil, fmt.Errorf("held dead letter: corrupt encoding")
		}
		b = b[k:]
		if n == 0 {
			return nil, nil
		}
		v := b[: n-1 : n-1]
		b = b[n-1:]
		return v, nil
	}
	rec := &kgo.Record{}
	var err error
	if rec.Key, err = next(); err != nil {
		return nil, err
	}
	if rec.Value, err = next(); err != nil {
		return nil, err
	}
	nh, k := binary.Uvarint(b)
	if k <= 0 || nh > uint64(len(b)) {
		return nil, fmt.Errorf("held dead letter: corrupt header count")
	}
	b = b[k:]
	rec.Headers = make([]kgo.RecordHeader, nh)
	for i := range rec.Headers {
		key, err := next()
		if err != nil {
			return nil, err
		}
		if rec.Headers[i].Value, err = next(); err != nil {
			return nil, err
		}
		rec.Headers[i].Key = string(key)
	}
	if len(b) != 0 {
		return nil, fmt.Errorf("held dead letter: %d trailing bytes", len(b))
	}
	return rec, nil
}
