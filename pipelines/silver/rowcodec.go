package silver

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"
	"unsafe"

	"github.com/sluicehq/sluice/stages/run"
)

// The silver sink is a run.Encoder: a coalescing window holds its rows
// encoded (about the size of their values, 110 bytes for a ta row and 450
// for an sa row of the benchmark corpus, against about 0.9 KiB of heap per
// key as Go values), so the process's memory budget holds 2–3 times more
// keys, and the garbage collector has nothing to mark in them.
var _ run.Encoder[Row] = (*router)(nil)

// Row encoding: a tag byte (rowEmpty, rowTA, rowSA), then the row's
// columns in the order of its struct, then the bytes of all its strings
// in that order. A string (or NULL string) column is its length as a
// uvarint, +1 when nullable (0 = NULL); a string array is its element count
// +1 (0 = NULL, 1 = '{}') followed by each element's length; a nullable
// number or boolean is a presence byte and, when present, the value; a
// time is what its AppendBinary form holds (instant and zone offset: a
// DATE column's day is taken in the time's zone) in varints (see
// rowEncoder.time). Decode copies
// the string bytes once into one string that the row's strings share.
const (
	rowEmpty byte = iota
	rowTA
	rowSA
)

// AppendEncoded implements run.Encoder.
func (r *router) AppendEncoded(dst []byte, row Row) []byte {
	var e rowEncoder
	switch {
	case row.TA != nil:
		e.head = append(dst, rowTA)
		t := row.TA
		e.str(t.Symbol)
		e.time(t.TradeDate)
		e.float(t.Open)
		e.float(t.High)
		e.float(t.Low)
		e.float(t.Close)
		e.head = binary.AppendVarint(e.head, t.Volume)
		e.optFloat(t.VWAP)
		e.optFloat(t.AdjClose)
		e.str(t.Currency)
		e.float(t.PriceMultiplier)
		e.optStr(t.Source)
		e.time(t.FirstSeenTime)
		e.time(t.IngestTime)
		e.optStr(t.ContentHash)
	case row.SA != nil:
		e.head = append(dst, rowSA)
		s := row.SA
		e.str(s.URLCanonical)
		e.str(s.SourceDomain)
		e.time(s.PublisherTime)
		e.time(s.FirstSeenTime)
		e.optStr(s.Language)
		e.optStr(s.Title)
		e.optStr(s.TextNormalized)
		e.str(s.ContentHash)
		e.strs(s.Symbols)
		e.optStr(s.Author)
		e.strs(s.TopicTags)
		e.optFloat(s.HypeRaw)
		e.optFloat(s.HypeCrowd)
		e.optFloat(s.HypeElitist)
		switch {
		case s.AccountWeightsApplied == nil:
			e.head = append(e.head, 0)
		case *s.AccountWeightsApplied:
			e.head = append(e.head, 2)
		default:
			e.head = append(e.head, 1)
		}
		e.time(s.IngestTime)
	default:
		return append(dst, rowEmpty)
	}
	return appendRowStrings(e.head, row)
}

// appendRowStrings appends the bytes of row's strings in the order in
// which AppendEncoded wrote their lengths (a second pass rather than a
// list of the strings: the list cost an allocation per row or two).
func appendRowStrings(b []byte, row Row) []byte {
	if t := row.TA; t != nil {
		b = append(b, t.Symbol...)
		b = append(b, t.Currency...)
		b = appendOpt(b, t.Source)
		return appendOpt(b, t.ContentHash)
	}
	s := row.SA
	b = append(b, s.URLCanonical...)
	b = append(b, s.SourceDomain...)
	b = appendOpt(b, s.Language)
	b = appendOpt(b, s.Title)
	b = appendOpt(b, s.TextNormalized)
	b = append(b, s.ContentHash...)
	for _, v := range s.Symbols {
		b = append(b, v...)
	}
	b = appendOpt(b, s.Author)
	for _, v := range s.TopicTags {
		b = append(b, v...)
	}
	return b
}

func appendOpt(b []byte, s *string) []byte {
	if s == nil {
		return b
	}
	return append(b, *s...)
}

// rowEncoder builds the columns of one encoding in head (the string
// bytes are appended after them by appendRowStrings).
type rowEncoder struct {
	head []byte
}

func (e *rowEncoder) str(s string) {
	e.head = binary.AppendUvarint(e.head, uint64(len(s)))
}

func (e *rowEncoder) optStr(s *string) {
	if s == nil {
		e.head = append(e.head, 0)
		return
	}
	e.head = binary.AppendUvarint(e.head, uint64(len(*s))+1)
}

func (e *rowEncoder) strs(ss []string) {
	if ss == nil {
		e.head = append(e.head, 0)
		return
	}
	e.head = binary.AppendUvarint(e.head, uint64(len(ss))+1)
	for _, s := range ss {
		e.str(s)
	}
}

// float appends f as a uvarint x: a decimal m×10^-k (k ≤ 3, exactly f:
// prices and scores, 1–4 bytes) is x = zigzag(m)<<3 | k<<1 | 1; any other
// value (-0, NaN, ±Inf, more digits) is x = 0 followed by its 8 bytes.
func (e *rowEncoder) float(f float64) {
	if math.Abs(f) < 1<<40 {
		for k := range 4 {
			p := pow10(uint64(k))
			m := math.Round(f * p)
			if math.Float64bits(m/p) == math.Float64bits(f) && (f != 0 || !math.Signbit(f)) {
				z := uint64(int64(m)<<1) ^ uint64(int64(m)>>63)
				e.head = binary.AppendUvarint(e.head, z<<3|uint64(k)<<1|1)
				return
			}
		}
	}
	e.head = append(e.head, 0)
	e.head = binary.LittleEndian.AppendUint64(e.head, math.Float64bits(f))
}

// pow10 returns 10^k, the scales of rowEncoder.float's decimals (k ≤ 3).
func pow10(k uint64) float64 {
	switch k {
	case 0:
		return 1
	case 1:
		return 10
	case 2:
		return 100
	}
	return 1000
}

func (e *rowEncoder) optFloat(f *float64) {
	if f == nil {
		e.head = append(e.head, 0)
		return
	}
	e.head = append(e.head, 1)
	e.float(*f)
}

// time appends t as what its AppendBinary form holds, in 6–12 bytes
// instead of that form's 16: the Unix seconds (varint), the nanoseconds
// shifted left by one with the low bit set for the UTC location (uvarint)
// and, unless UTC, the zone offset in minutes (varint). A zone offset that
// is not a whole minute keeps the instant in UTC (the columns are
// timestamptz or a date at midnight UTC).
func (e *rowEncoder) time(t time.Time) {
	utc := t.Location() == time.UTC
	off := 0
	if !utc { // the common case needs no zone lookup
		_, off = t.Zone()
		if off%60 != 0 || off/60 < math.MinInt16 || off/60 > math.MaxInt16 {
			t, utc = t.UTC(), true
		}
	}
	e.head = binary.AppendVarint(e.head, t.Unix())
	ns := uint64(t.Nanosecond()) << 1
	if utc {
		e.head = binary.AppendUvarint(e.head, ns|1)
		return
	}
	e.head = binary.AppendUvarint(e.head, ns)
	e.head = binary.AppendVarint(e.head, int64(off/60))
}

// errCorruptRow reports an encoding Decode cannot read.
var errCorruptRow = errors.New("silver: corrupt row encoding")

// Decode implements run.Encoder. The row's memory (none of it b's) is
// carved from chunks shared with the rows decoded before and after it
// (rowMemory), so that a row costs no allocation of its own: the rows of
// a window part live until the part is written.
func (r *router) Decode(b []byte) (Row, error) {
	if len(b) == 0 {
		return Row{}, errCorruptRow
	}
	if b[0] == rowEmpty {
		return Row{}, nil
	}
	mem := r.mem.get()
	defer r.mem.put(mem)
	d := rowDecoder{b: b, pos: 1, mem: mem}
	switch b[0] {
	case rowTA:
		box := mem.newTA()
		if err := d.ta(box); err != nil {
			return Row{}, err
		}
		mem.keepTA()
		return Row{TA: &box.row}, nil
	case rowSA:
		box := mem.newSA()
		if err := d.sa(box); err != nil {
			return Row{}, err
		}
		mem.keepSA()
		return Row{SA: &box.row}, nil
	}
	return Row{}, fmt.Errorf("%w: tag %d", errCorruptRow, b[0])
}

// AppendMerged implements run.EncodedMerger: it appends the encoding of
// Merge(Decode(old), next), decoding old's strings as views of old (they
// are copied into dst by the encoding) into a row that does not outlive
// the call (in memory of the router's pool, cleared after use).
func (r *router) AppendMerged(dst, old []byte, next Row) ([]byte, error) {
	if len(old) == 0 {
		return dst, errCorruptRow
	}
	d := rowDecoder{b: old, pos: 1, view: true}
	switch {
	case old[0] == rowTA && next.TA != nil:
		// MergeTA takes every column from next but first_seen_time.
		_, _, fst := d.taKey()
		if d.err != nil {
			return dst, d.err
		}
		m := MergeTA(TARow{FirstSeenTime: fst}, *next.TA)
		return r.AppendEncoded(dst, Row{TA: &m}), nil
	case old[0] == rowSA && next.SA != nil:
		mem := r.mem.get()
		defer r.mem.put(mem)
		d.mem = mem
		box := mem.newSA()
		defer func() { // keep no views of old
			*box = saOut{}
			clear(mem.views)
			mem.views = mem.views[:0]
		}()
		if err := d.sa(box); err != nil {
			return dst, err
		}
		m := MergeSA(box.row, *next.SA)
		return r.AppendEncoded(dst, Row{SA: &m}), nil
	}
	o, err := r.Decode(old)
	if err != nil {
		return dst, err
	}
	return r.AppendEncoded(dst, r.Merge(o, next)), nil
}

var _ run.EncodedMerger[Row] = (*router)(nil)

// ta decodes a ta row (after its tag) into box.
func (d *rowDecoder) ta(box *taOut) error {
	t := &box.row
	sym := d.str()
	t.TradeDate = d.time()
	t.Open, t.High, t.Low, t.Close = d.float(), d.float(), d.float(), d.float()
	t.Volume = d.varint()
	t.VWAP = d.optFloat(&box.vwap)
	t.AdjClose = d.optFloat(&box.adjClose)
	cur := d.str()
	t.PriceMultiplier = d.float()
	src := d.optStr()
	t.FirstSeenTime = d.time()
	t.IngestTime = d.time()
	hash := d.optStr()
	d.strings()
	t.Symbol, t.Currency = d.take(sym), d.take(cur)
	t.Source = d.takeOpt(src, &box.source)
	t.ContentHash = d.takeOpt(hash, &box.contentHash)
	return d.err
}

// taKey reads the columns of a ta row (after its tag) and returns the
// length of its symbol, its trade date and its first_seen_time.
func (d *rowDecoder) taKey() (sym int, date, firstSeen time.Time) {
	var f float64
	sym = d.str()
	date = d.time()
	d.float()
	d.float()
	d.float()
	d.float()
	d.varint()
	d.optFloat(&f)
	d.optFloat(&f)
	d.str()
	d.float()
	d.optStr()
	firstSeen = d.time()
	d.time()
	d.optStr()
	return sym, date, firstSeen
}

// sa decodes an sa row (after its tag) into box.
func (d *rowDecoder) sa(box *saOut) error {
	s := &box.row
	url, dom := d.str(), d.str()
	s.PublisherTime, s.FirstSeenTime = d.time(), d.time()
	lang, title, text := d.optStr(), d.optStr(), d.optStr()
	hash := d.str()
	syms := d.strs()
	author := d.optStr()
	tags := d.strs()
	s.HypeRaw = d.optFloat(&box.hype[0])
	s.HypeCrowd = d.optFloat(&box.hype[1])
	s.HypeElitist = d.optFloat(&box.hype[2])
	switch d.byte() {
	case 1:
		s.AccountWeightsApplied = &box.weights
	case 2:
		box.weights = true
		s.AccountWeightsApplied = &box.weights
	}
	s.IngestTime = d.time()
	d.strings()
	s.URLCanonical, s.SourceDomain = d.take(url), d.take(dom)
	s.Language = d.takeOpt(lang, &box.language)
	s.Title = d.takeOpt(title, &box.title)
	s.TextNormalized = d.takeOpt(text, &box.text)
	s.ContentHash = d.take(hash)
	s.Symbols = d.takeStrs(syms)
	s.Author = d.takeOpt(author, &box.author)
	s.TopicTags = d.takeStrs(tags)
	return d.err
}

// rowDecoder reads an encoding: first the columns (string lengths among
// them), then, after strings(), the string bytes in the same order.
type rowDecoder struct {
	b    []byte
	pos  int
	err  error
	blob string // the string bytes, copied once (a view of b when view is set)
	at   int    // next string's offset in blob
	// view makes the strings views of b instead of a copy: the decoded
	// row must then not outlive b's contents (AppendMerged).
	view bool
	// mem is where a copy's string bytes and arrays are carved from (its
	// views hold a view's arrays); nil: allocated.
	mem *rowMemory
	// lens holds the element lengths of the row's arrays (strs), nlens of
	// them used, sparing an allocation per array.
	lens  [16]int
	nlens int
}

func (d *rowDecoder) fail() {
	if d.err == nil {
		d.err = errCorruptRow
	}
	d.pos = len(d.b)
}

func (d *rowDecoder) byte() byte {
	if d.pos >= len(d.b) {
		d.fail()
		return 0
	}
	d.pos++
	return d.b[d.pos-1]
}

func (d *rowDecoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.b[d.pos:])
	if n <= 0 {
		d.fail()
		return 0
	}
	d.pos += n
	return v
}

func (d *rowDecoder) varint() int64 {
	v, n := binary.Varint(d.b[d.pos:])
	if n <= 0 {
		d.fail()
		return 0
	}
	d.pos += n
	return v
}

func (d *rowDecoder) float() float64 {
	x := d.uvarint()
	if x&1 == 1 {
		z := x >> 3
		m := int64(z>>1) ^ -int64(z&1)
		return float64(m) / pow10(x>>1&3)
	}
	if x != 0 || len(d.b)-d.pos < 8 {
		d.fail()
		return 0
	}
	d.pos += 8
	return math.Float64frombits(binary.LittleEndian.Uint64(d.b[d.pos-8:]))
}

func (d *rowDecoder) optFloat(dst *float64) *float64 {
	if d.byte() == 0 {
		return nil
	}
	*dst = d.float()
	return dst
}

// time reads a time rowEncoder.time wrote, in the zone UnmarshalBinary
// gives the AppendBinary form: UTC, Local when its offset at that instant
// is the stored one, else a fixed zone of the offset.
func (d *rowDecoder) time() time.Time {
	sec := d.varint()
	ns := d.uvarint()
	if d.err != nil || ns>>1 >= 1e9 {
		d.fail()
		return time.Time{}
	}
	t := time.Unix(sec, int64(ns>>1))
	if ns&1 == 1 {
		return t.UTC()
	}
	off := d.varint()
	if d.err != nil || off < math.MinInt16 || off > math.MaxInt16 {
		d.fail()
		return time.Time{}
	}
	if _, lo := t.In(time.Local).Zone(); int64(lo) == off*60 {
		return t.In(time.Local)
	}
	return t.In(time.FixedZone("", int(off)*60))
}

// str and optStr read a string's length (optStr: -1 for NULL).
func (d *rowDecoder) str() int { return int(d.uvarint()) }

func (d *rowDecoder) optStr() int { return int(d.uvarint()) - 1 }

// strs reads an array's element lengths (nil for NULL, empty for '{}').
func (d *rowDecoder) strs() []int {
	n := int(d.uvarint())
	if n == 0 || n-1 > len(d.b)-d.pos {
		if n != 0 {
			d.fail()
		}
		return nil
	}
	var lens []int
	if used := d.nlens; n-1 <= len(d.lens)-used {
		lens = d.lens[used : used+n-1 : used+n-1]
		d.nlens += n - 1
	} else {
		lens = make([]int, n-1)
	}
	for i := range lens {
		lens[i] = d.str()
	}
	return lens
}

// strings copies the string bytes that follow the columns.
func (d *rowDecoder) strings() {
	switch {
	case d.err != nil || d.pos == len(d.b):
	case d.view:
		d.blob = unsafe.String(&d.b[d.pos], len(d.b)-d.pos)
	case d.mem != nil:
		buf := append(d.mem.bytes(len(d.b)-d.pos), d.b[d.pos:]...)
		d.blob = unsafe.String(unsafe.SliceData(buf), len(buf)) // never modified again
	default:
		d.blob = string(d.b[d.pos:])
	}
}

func (d *rowDecoder) take(n int) string {
	if n < 0 || len(d.blob)-d.at < n {
		d.fail()
		return ""
	}
	d.at += n
	return d.blob[d.at-n : d.at]
}

func (d *rowDecoder) takeOpt(n int, dst *string) *string {
	if n < 0 {
		return nil
	}
	*dst = d.take(n)
	return dst
}

func (d *rowDecoder) takeStrs(lens []int) []string {
	var out []string
	switch {
	case lens == nil:
		return nil
	case d.mem == nil:
		out = make([]string, len(lens))
	case d.view:
		out = d.mem.view(len(lens))
	default:
		out = d.mem.strings(len(lens))
	}
	for i, n := range lens {
		out[i] = d.take(n)
	}
	return out
}
