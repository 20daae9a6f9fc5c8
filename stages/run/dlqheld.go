package run

import (
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/klauspost/compress/s2"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/stages"
)

// heldOverhead is what a held dead letter counts in the memory budget
// besides its share of the compressed block: its labels.
const heldOverhead = 32

// heldBlockOverhead is what one block of held dead letters counts besides
// its bytes: its slice header and allocation's rounding.
const heldBlockOverhead = 64

// hold packs the dead letters dlq (of the DLQ topic) into one block of h,
// compressed with S2, and returns the bytes they count in the memory
// budget. Held packed, a dead letter is a share of one allocation instead
// of a record and a dozen header values; compressed, the dead letters of
// a batch (records of one source with the same dlq.* headers) take a
// fraction of their bytes: silver's windows hold tens of thousands of
// them under a backlog, taken from the windows' share of the budget.
func (h *heldDLQ) hold(dlq []*kgo.Record, labels [][2]string) int64 {
	if len(dlq) == 0 {
		return 0
	}
	raw := h.scratch[:0]
	for _, rec := range dlq {
		raw = appendPacked(raw, rec)
	}
	h.scratch = raw
	enc := s2.Encode(h.encBuf[:cap(h.encBuf)], raw)
	block := slices.Clone(enc)
	h.encBuf = enc[:0]
	if len(raw) > maxHeldScratch {
		h.scratch, h.encBuf = nil, nil // a large batch's buffers are not kept
	}
	h.dlq = append(h.dlq, block)
	h.labels = append(h.labels, labels...)
	n := int64(len(block)) + heldBlockOverhead + heldOverhead*int64(len(dlq))
	h.bytes += n
	return n
}

// maxHeldScratch bounds the buffers a worker keeps for hold between batches.
const maxHeldScratch = 1 << 20

// appendPacked appends rec's packed encoding to b, preceded by its length
// (uvarint): its key, value and headers (not its topic), each as a uvarint
// of its length plus one (0: nil) and its bytes, the headers preceded by
// their count.
func appendPacked(b []byte, rec *kgo.Record) []byte {
	b = binary.AppendUvarint(b, uint64(packedLen(rec)))
	b = appendNullable(b, rec.Key, rec.Key == nil)
	b = appendNullable(b, rec.Value, rec.Value == nil)
	b = binary.AppendUvarint(b, uint64(len(rec.Headers)))
	for _, hd := range rec.Headers {
		b = append(binary.AppendUvarint(b, uint64(len(hd.Key))+1), hd.Key...)
		b = appendNullable(b, hd.Value, hd.Value == nil)
	}
	return b
}

// packedLen returns the length of rec's packed encoding (appendPacked).
func packedLen(rec *kgo.Record) int {
	n := nullableLen(len(rec.Key), rec.Key == nil) + nullableLen(len(rec.Value), rec.Value == nil) + uvarintLen(len(rec.Headers))
	for _, hd := range rec.Headers {
		n += nullableLen(len(hd.Key), false) + nullableLen(len(hd.Value), hd.Value == nil)
	}
	return n
}

// nullableLen returns the length of appendNullable's encoding of n bytes.
func nullableLen(n int, null bool) int {
	if null {
		return 1
	}
	return uvarintLen(n+1) + n
}

// records returns the held dead letters as records of topic.
func (h *heldDLQ) records(topic string) ([]*kgo.Record, error) {
	recs := make([]*kgo.Record, 0, len(h.labels))
	all := make([]kgo.Record, len(h.labels)) // the records, one per label
	var hdrs []kgo.RecordHeader              // their headers, sharing larger arrays
	for _, block := range h.dlq {
		raw, err := s2.Decode(nil, block)
		if err != nil {
			return nil, fmt.Errorf("held dead letters: %w", err)
		}
		for len(raw) > 0 {
			n, k := binary.Uvarint(raw)
			if k <= 0 || n > uint64(len(raw)-k) {
				return nil, fmt.Errorf("held dead letters: corrupt block")
			}
			rec := &kgo.Record{}
			if len(recs) < len(all) {
				rec = &all[len(recs)]
			}
			if err := unpackDeadLetter(raw[k:k+int(n):k+int(n)], rec, &hdrs, len(h.labels)-len(recs)); err != nil {
				return nil, err
			}
			rec.Topic = topic
			recs = append(recs, rec)
			raw = raw[k+int(n):]
		}
	}
	return recs, nil
}

func appendNullable(b, v []byte, null bool) []byte {
	if null {
		return binary.AppendUvarint(b, 0)
	}
	return append(binary.AppendUvarint(b, uint64(len(v))+1), v...)
}

// unpackDeadLetter decodes a packed encoding (appendPacked) into rec; the
// record's key, value and header values refer to b, its headers are taken
// from the free capacity of *hdrs. When that is too small, a new array
// takes them, sized for the left records to unpack (this one included)
// with as many headers each, up to unpackHeaders: a few dead letters do
// not hold an array much larger than the bytes they count in the
// committer's bound (recordsBytes).
func unpackDeadLetter(b []byte, rec *kgo.Record, hdrs *[]kgo.RecordHeader, left int) error {
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
	var err error
	if rec.Key, err = next(); err != nil {
		return err
	}
	if rec.Value, err = next(); err != nil {
		return err
	}
	nh, k := binary.Uvarint(b)
	if k <= 0 || nh > uint64(len(b)) {
		return fmt.Errorf("held dead letter: corrupt header count")
	}
	b = b[k:]
	if cap(*hdrs)-len(*hdrs) < int(nh) {
		*hdrs = make([]kgo.RecordHeader, 0, max(int(nh), min(unpackHeaders, int(nh)*max(left, 1))))
	}
	at := len(*hdrs)
	*hdrs = (*hdrs)[:at+int(nh)]
	rec.Headers = (*hdrs)[at : at+int(nh) : at+int(nh)]
	for i := range rec.Headers {
		key, err := next()
		if err != nil {
			return err
		}
		if rec.Headers[i].Value, err = next(); err != nil {
			return err
		}
		rec.Headers[i].Key = headerKey(key)
	}
	if len(b) != 0 {
		return fmt.Errorf("held dead letter: %d trailing bytes", len(b))
	}
	return nil
}

// unpackHeaders bounds the headers of the arrays unpackDeadLetter sizes
// for the records left (a record with more takes an array of its own).
const unpackHeaders = 1024

// headerKey returns key as a string, the constant one without an
// allocation for the dlq.* headers every dead letter carries.
func headerKey(key []byte) string {
	for _, k := range dlqMetaKeys() {
		if string(key) == k {
			return k
		}
	}
	if string(key) == stages.HeaderRedriveCount {
		return stages.HeaderRedriveCount
	}
	return string(key)
}
