package trades

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/shopspring/decimal"
)

// The digest store keeps, per (user, window), two keys:
//
//   - W|user|start: the window's state (WindowState), a JSON object
//     {revision, emitted_revision, last_change, ...} of ~150 bytes (one
//     per user-week);
//   - C|user|start: the window's contributions, one per trade id: exactly
//     what Aggregate reads of the trade's latest trade.scored (ts, broker,
//     ext_id, side, qty × price, fee, realized P/L, labels, and a SELL's
//     lots' labels and P/L), in a compact binary form.
//
// Dedupe is exact: the contributions are keyed by the trade id itself (its
// 16 bytes when it is a canonical UUID), not by a hash of it, so no two
// trades can share an entry and a redelivered or re-scored trade replaces
// its own. On the changelog a trade id equal to TradeID(user, broker,
// ext_id) — every id trades-import makes — is not written (it is derived
// again on restore); any other id is written in full.

// contrib is one trade's contribution to its window's digest.
type contrib struct {
	TradeID  string
	Broker   string
	ExtID    string
	TS       time.Time
	Sell     bool // any side but BUY counts as a SELL, as in Aggregate
	Notional decimal.Decimal
	Fee      decimal.Decimal
	Realized decimal.Decimal // SELLs only; a missing realized_pnl is 0
	Labels   []string        // distinct, sorted
	Lots     []lotContrib    // SELLs only
}

// lotContrib is a matched lot of a SELL: its labels (distinct, sorted) and
// its P/L.
type lotContrib struct {
	Labels []string
	PnL    decimal.Decimal
}

// contribOf returns the contribution of a trade.scored.
func contribOf(c TradeScored) contrib {
	k := contrib{TradeID: c.TradeID, Broker: c.Broker, ExtID: c.ExtID, TS: c.TS, Sell: c.Side != Buy,
		Notional: c.Qty.Mul(c.Price.Decimal), Fee: c.Fee.Decimal, Labels: distinct(c.Labels)}
	if !k.Sell {
		return k
	}
	if c.RealizedPnL != nil {
		k.Realized = c.RealizedPnL.Decimal
	}
	for _, lot := range c.Lots {
		k.Lots = append(k.Lots, lotContrib{Labels: distinct(lot.Labels), PnL: lot.PnL.Decimal})
	}
	return k
}

// knownBrokers and knownLabels are coded as small numbers in the
// encoding; any other broker or label is written as its text.
var (
	knownBrokers = [...]string{"synthetic", "coinbase", "binance"}
	knownLabels  = [...]string{LabelOvertrading, LabelRevengeTrading, LabelSizeEscalation}
)

// Flags of an encoded contribution.
const (
	cfSell    = 1 << iota
	cfDerived // the trade id is TradeID(user, broker, ext_id): not written
	cfUUID    // the trade id is a canonical UUID, written as its 16 bytes
	cfNanos   // ts has a sub-second part
)

// contribKey is the key of a trade id in a window's contributions: 0x00
// and its 16 bytes for a canonical UUID, 0x01 and its text otherwise —
// one key per trade id, and no two ids with one key.
func contribKey(tradeID string) string {
	if u, err := uuid.Parse(tradeID); err == nil && u.String() == tradeID {
		return "\x00" + string(u[:])
	}
	return "\x01" + tradeID
}

// tradeIDOfKey inverts contribKey.
func tradeIDOfKey(key string) string {
	if len(key) == 17 && key[0] == 0 {
		return uuid.UUID([]byte(key[1:])).String()
	}
	return key[1:]
}

// encodeContrib returns the key and the encoding of c, a contribution of
// userID's. Two trade.scored with the same encoding give every digest the
// same contribution.
func encodeContrib(userID string, c contrib) (key, enc string) {
	key = contribKey(c.TradeID)
	b := make([]byte, 1, 48)
	var flags byte
	if c.Sell {
		flags |= cfSell
	}
	b = appendCode(b, c.Broker, knownBrokers[:])
	b = appendString(b, c.ExtID)
	switch {
	case c.TradeID == TradeID(userID, c.Broker, c.ExtID):
		flags |= cfDerived
	case key[0] == 0:
		flags |= cfUUID
		b = append(b, key[1:]...)
	default:
		b = appendString(b, c.TradeID)
	}
	b = binary.AppendVarint(b, c.TS.Unix())
	if ns := c.TS.Nanosecond(); ns != 0 {
		flags |= cfNanos
		b = binary.AppendUvarint(b, uint64(ns))
	}
	b = appendDecimal(b, c.Notional)
	b = appendDecimal(b, c.Fee)
	b = appendLabels(b, c.Labels)
	if c.Sell {
		b = appendDecimal(b, c.Realized)
		b = binary.AppendUvarint(b, uint64(len(c.Lots)))
		for _, l := range c.Lots {
			b = appendLabels(b, l.Labels)
			b = appendDecimal(b, l.PnL)
		}
	}
	b[0] = flags
	return key, string(b)
}

// decodeContrib decodes the encoding of one of userID's contributions.
// key is its key, or "" when the caller does not know it: then the trade
// id is derived or read from enc, and the key returned is made from it.
func decodeContrib(userID, key, enc string) (contrib, string, error) {
	r := byteReader{s: enc}
	flags := r.byte()
	var c contrib
	c.Sell = flags&cfSell != 0
	c.Broker = r.code(knownBrokers[:])
	c.ExtID = r.string()
	switch {
	case flags&cfDerived != 0:
		if key != "" {
			c.TradeID = tradeIDOfKey(key)
		} else {
			c.TradeID = TradeID(userID, c.Broker, c.ExtID)
		}
	case flags&cfUUID != 0:
		c.TradeID = uuid.UUID([]byte(r.take(16))).String()
	default:
		c.TradeID = r.string()
	}
	sec := r.varint()
	ns := int64(0)
	if flags&cfNanos != 0 {
		ns = int64(r.uvarint())
	}
	c.TS = time.Unix(sec, ns).UTC()
	c.Notional, c.Fee = r.decimal(), r.decimal()
	c.Labels = r.labels()
	if c.Sell {
		c.Realized = r.decimal()
		n := r.uvarint()
		if n > uint64(len(enc)) {
			r.err = errors.New("lot count beyond the value")
		}
		for i := uint64(0); i < n && r.err == nil; i++ {
			c.Lots = append(c.Lots, lotContrib{Labels: r.labels(), PnL: r.decimal()})
		}
	}
	if r.err == nil && r.off != len(enc) {
		r.err = fmt.Errorf("%d bytes after the contribution", len(enc)-r.off)
	}
	if r.err != nil {
		return contrib{}, "", fmt.Errorf("digest contribution: %w", r.err)
	}
	if key == "" {
		key = contribKey(c.TradeID)
	}
	return c, key, nil
}

// windowContribs is a window's contributions: contribKey → encodeContrib's
// encoding. The digester owns it (one partition's worker) and changes it
// in place before it Puts it again; the store encodes it at its flush.
type windowContribs map[string]string

// Leading bytes of the digest store's changelog values: a window state is
// a JSON object; a contribution set is binary, tagged 'D' (sorted by ts,
// see encodeContribs) or 'C' (in key order, as first written; still read,
// and written for a set encodeContribs cannot sort). tagWindow tags the
// binary window state of an earlier layout, still read.
const (
	tagWindowJSON     = '{'
	tagWindow         = 'W'
	tagContribs       = 'C'
	tagContribsSorted = 'D'
)

// encodeWindowState encodes a window's state as the JSON object
// WindowState's tags name (schemas/json/trades.digest.state.json), times in
// UTC; revision, emitted_revision and last_change are always written.
func encodeWindowState(w WindowState) ([]byte, error) {
	w.LastChange, w.PublishMark = w.LastChange.UTC(), w.PublishMark.UTC()
	b, err := json.Marshal(w)
	if err != nil {
		return nil, fmt.Errorf("encode window state: %w", err)
	}
	return b, nil
}

// decodeWindowState decodes encodeWindowState's JSON. It rejects unknown
// fields (a per-trade value of an earlier layout is no window state), a
// missing revision, emitted_revision or last_change, and negative
// revisions.
func decodeWindowState(b []byte) (WindowState, error) {
	var w WindowState
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&w); err != nil {
		return WindowState{}, fmt.Errorf("digest window state: %w", err)
	}
	if dec.More() {
		return WindowState{}, errors.New("digest window state: data after the object")
	}
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(b, &keys); err != nil {
		return WindowState{}, fmt.Errorf("digest window state: %w", err)
	}
	for _, k := range []string{"revision", "emitted_revision", "last_change"} {
		if _, ok := keys[k]; !ok {
			return WindowState{}, fmt.Errorf("digest window state: no %s", k)
		}
	}
	if w.Revision < 0 || w.EmittedRevision < 0 {
		return WindowState{}, fmt.Errorf("digest window state: negative revision (%d, emitted %d)", w.Revision, w.EmittedRevision)
	}
	return w, nil
}

// decodeBinaryWindowState decodes the binary window state of an earlier
// layout: tag 'W', revision, emitted revision (uvarints), flags (1
// partial, 2 last change, 4 publishing), the emitted aggregate's hash
// (length-prefixed bytes), then last_change and publish_mark (Unix ns
// varints) when their flags are set.
func decodeBinaryWindowState(s string) (WindowState, error) {
	r := byteReader{s: s, off: 1}
	var w WindowState
	w.Revision, w.EmittedRevision = int(r.uvarint()), int(r.uvarint())
	flags := r.byte()
	w.EmittedPartial = flags&1 != 0
	w.EmittedAgg = hex.EncodeToString([]byte(r.string()))
	if flags&2 != 0 {
		w.LastChange = time.Unix(0, r.varint()).UTC()
	}
	if flags&4 != 0 {
		w.Publishing, w.PublishMark = true, time.Unix(0, r.varint()).UTC()
	}
	if r.err == nil && r.off != len(s) {
		r.err = fmt.Errorf("%d bytes after the window state", len(s)-r.off)
	}
	if r.err != nil {
		return WindowState{}, fmt.Errorf("digest window state: %w", r.err)
	}
	return w, nil
}

// encodeContribs encodes a window's contributions: tag 'D', user id,
// count, then the contributions in (ts, key) order, each as its encoding
// (encodeContrib) with two fields written against the previous one: ext_id
// as the length of the prefix it shares with the previous ext_id and the
// rest, ts's seconds as the difference to the previous ones (a window's
// trades are seconds to hours apart: 1–3 bytes instead of 5). The other
// fields are copied as they are. The keys are not written: decodeContribs
// makes them from the encodings, which it gives back byte for byte. A set
// with an encoding it cannot read (none that encodeContrib writes) is
// written in the 'C' layout (encodeContribsKeyed).
func encodeContribs(userID string, m windowContribs) []byte {
	parts := make([]contribParts, 0, len(m))
	n := 0
	for k, v := range m {
		p, ok := splitContrib(k, v)
		if !ok {
			return encodeContribsKeyed(userID, m)
		}
		parts = append(parts, p)
		n += len(v) + 2
	}
	slices.SortFunc(parts, func(a, b contribParts) int {
		return cmp.Or(cmp.Compare(a.sec, b.sec), strings.Compare(a.key, b.key))
	})
	b := make([]byte, 0, n+len(userID)+8)
	b = append(b, tagContribsSorted)
	b = appendString(b, userID)
	b = binary.AppendUvarint(b, uint64(len(parts)))
	var prev contribParts
	for _, p := range parts {
		b = append(b, p.flags)
		b = append(b, p.broker...)
		shared := 0
		for shared < len(p.ext) && shared < len(prev.ext) && p.ext[shared] == prev.ext[shared] {
			shared++
		}
		b = binary.AppendUvarint(b, uint64(shared))
		b = appendString(b, p.ext[shared:])
		b = append(b, p.id...)
		b = binary.AppendVarint(b, p.sec-prev.sec)
		b = append(b, p.nanos...)
		b = appendString(b, p.rest)
		prev = p
	}
	return b
}

// contribParts is an encoding (encodeContrib) cut into the fields
// encodeContribs writes: the raw bytes of the broker code, the trade id
// and the nanoseconds, the ext_id and ts's seconds as values, and the rest
// (decimals, labels, lots) as it is.
type contribParts struct {
	key                          string
	flags                        byte
	broker, ext, id, nanos, rest string
	sec                          int64
}

// splitContrib cuts v, the encoding of key; ok is false when it does not
// read as one.
func splitContrib(key, v string) (contribParts, bool) {
	r := byteReader{s: v}
	p := contribParts{key: key, flags: r.byte()}
	p.broker = r.rawCode()
	p.ext = r.string()
	p.id = r.rawID(p.flags)
	p.sec = r.varint()
	p.nanos = r.rawNanos(p.flags)
	p.rest = v[r.off:]
	return p, r.err == nil
}

// rawCode reads a broker code (appendCode) and returns its bytes.
func (r *byteReader) rawCode() string {
	o := r.off
	r.code(knownBrokers[:])
	return r.s[o:r.off]
}

// rawID reads the trade id field of an encoding with flags and returns
// its bytes (none for a derived id).
func (r *byteReader) rawID(flags byte) string {
	o := r.off
	switch {
	case flags&cfDerived != 0:
	case flags&cfUUID != 0:
		r.take(16)
	default:
		r.string()
	}
	return r.s[o:r.off]
}

// rawNanos reads ts's nanoseconds field of an encoding with flags and
// returns its bytes (none for whole seconds).
func (r *byteReader) rawNanos(flags byte) string {
	o := r.off
	if flags&cfNanos != 0 {
		r.uvarint()
	}
	return r.s[o:r.off]
}

// joinContrib is the encoding p was cut from.
// One allocation: the encodings are most of a restored store's memory.
func joinContrib(p contribParts) string {
	var num [2 * binary.MaxVarintLen64]byte
	ext := binary.AppendUvarint(num[:0], uint64(len(p.ext)))
	sec := binary.AppendVarint(num[len(ext):len(ext)], p.sec)
	var b strings.Builder
	b.Grow(1 + len(p.broker) + len(ext) + len(p.ext) + len(p.id) + len(sec) + len(p.nanos) + len(p.rest))
	b.WriteByte(p.flags)
	b.WriteString(p.broker)
	b.Write(ext)
	b.WriteString(p.ext)
	b.WriteString(p.id)
	b.Write(sec)
	b.WriteString(p.nanos)
	b.WriteString(p.rest)
	return b.String()
}

// encodeContribsKeyed encodes a window's contributions in the 'C' layout:
// tag, user id, count, then each encoding (length-prefixed), in key order.
func encodeContribsKeyed(userID string, m windowContribs) []byte {
	keys := make([]string, 0, len(m))
	n := 0
	for k, v := range m {
		keys = append(keys, k)
		n += len(v) + 2
	}
	slices.Sort(keys)
	b := make([]byte, 0, n+len(userID)+8)
	b = append(b, tagContribs)
	b = appendString(b, userID)
	b = binary.AppendUvarint(b, uint64(len(m)))
	for _, k := range keys {
		b = appendString(b, m[k])
	}
	return b
}

// decodeContribs decodes a contribution set of either layout.
func decodeContribs(s string) (string, windowContribs, error) {
	sorted := len(s) > 0 && s[0] == tagContribsSorted
	r := byteReader{s: s, off: 1}
	user := r.string()
	n := r.uvarint()
	if n > uint64(len(s)) {
		return "", nil, errors.New("digest contributions: count beyond the value")
	}
	m := make(windowContribs, n)
	var prev contribParts
	for i := uint64(0); i < n && r.err == nil; i++ {
		var enc string
		if sorted {
			p := contribParts{flags: r.byte()}
			p.broker = r.rawCode()
			shared := r.uvarint()
			suffix := r.string()
			if shared > uint64(len(prev.ext)) {
				r.fail("ext_id prefix")
			}
			if r.err != nil {
				break
			}
			p.ext = prev.ext[:shared] + suffix
			p.id = r.rawID(p.flags)
			p.sec = prev.sec + r.varint()
			p.nanos = r.rawNanos(p.flags)
			p.rest = r.string()
			if r.err != nil {
				break
			}
			enc, prev = joinContrib(p), p
		} else if enc = r.string(); r.err != nil {
			break
		}
		_, key, err := decodeContrib(user, "", enc)
		if err != nil {
			return "", nil, err
		}
		m[key] = enc
	}
	if sorted && r.err == nil && r.off != len(s) {
		r.err = fmt.Errorf("%d bytes after the contributions", len(s)-r.off)
	}
	if r.err != nil {
		return "", nil, fmt.Errorf("digest contributions: %w", r.err)
	}
	return user, m, nil
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// appendCode writes s as 1 + its index in known, or 0 and its text.
func appendCode(b []byte, s string, known []string) []byte {
	if i := slices.Index(known, s); i >= 0 {
		return binary.AppendUvarint(b, uint64(i+1))
	}
	return appendString(append(b, 0), s)
}

// appendLabels writes distinct sorted labels: a mask of the known ones
// (bit len(knownLabels): others follow), then the others' count and text.
func appendLabels(b []byte, labels []string) []byte {
	var mask uint64
	var other []string
	for _, l := range labels {
		if i := slices.Index(knownLabels[:], l); i >= 0 {
			mask |= 1 << i
		} else {
			other = append(other, l)
		}
	}
	if len(other) > 0 {
		mask |= 1 << len(knownLabels)
	}
	b = binary.AppendUvarint(b, mask)
	if len(other) > 0 {
		b = binary.AppendUvarint(b, uint64(len(other)))
		for _, l := range other {
			b = appendString(b, l)
		}
	}
	return b
}

// appendDecimal writes d exactly: its exponent (×2, +1 when the
// coefficient does not fit an int64), then the coefficient as a varint or
// as sign and magnitude bytes.
func appendDecimal(b []byte, d decimal.Decimal) []byte {
	c := d.Coefficient()
	if c.IsInt64() {
		b = binary.AppendVarint(b, int64(d.Exponent())*2)
		return binary.AppendVarint(b, c.Int64())
	}
	b = binary.AppendVarint(b, int64(d.Exponent())*2+1)
	b = append(b, byte(c.Sign()+1))
	return appendString(b, string(c.Bytes()))
}

// byteReader reads what the append functions wrote; the first error
// sticks and makes every later read return zero values.
type byteReader struct {
	s   string
	off int
	err error
}

func (r *byteReader) fail(what string) {
	if r.err == nil {
		r.err = fmt.Errorf("truncated or invalid %s at byte %d", what, r.off)
	}
}

func (r *byteReader) byte() byte {
	if r.err != nil || r.off >= len(r.s) {
		r.fail("byte")
		return 0
	}
	r.off++
	return r.s[r.off-1]
}

func (r *byteReader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint([]byte(r.s[r.off:min(len(r.s), r.off+binary.MaxVarintLen64)]))
	if n <= 0 {
		r.fail("uvarint")
		return 0
	}
	r.off += n
	return v
}

// varint reads binary.AppendVarint's encoding: the zig-zag uvarint.
func (r *byteReader) varint() int64 {
	u := r.uvarint()
	x := int64(u >> 1)
	if u&1 != 0 {
		x = ^x
	}
	return x
}

func (r *byteReader) take(n int) string {
	if r.err != nil || n < 0 || r.off+n > len(r.s) {
		r.fail("bytes")
		return ""
	}
	r.off += n
	return r.s[r.off-n : r.off]
}

func (r *byteReader) string() string {
	n := r.uvarint()
	if n > uint64(len(r.s)) {
		r.fail("length")
		return ""
	}
	return r.take(int(n))
}

func (r *byteReader) code(known []string) string {
	i := r.uvarint()
	switch {
	case r.err != nil:
		return ""
	case i == 0:
		return r.string()
	case i <= uint64(len(known)):
		return known[i-1]
	}
	r.fail("code")
	return ""
}

func (r *byteReader) labels() []string {
	mask := r.uvarint()
	if r.err != nil || mask == 0 {
		return nil
	}
	var out []string
	for i, l := range knownLabels {
		if mask&(1<<i) != 0 {
			out = append(out, l)
		}
	}
	if mask&(1<<len(knownLabels)) != 0 {
		n := r.uvarint()
		if n > uint64(len(r.s)) {
			r.fail("label count")
			return nil
		}
		for range n {
			out = append(out, r.string())
		}
		slices.Sort(out)
	}
	return out
}

func (r *byteReader) decimal() decimal.Decimal {
	e := r.varint()
	if r.err != nil {
		return decimal.Zero
	}
	exp := e >> 1
	if exp != int64(int32(exp)) {
		r.fail("exponent")
		return decimal.Zero
	}
	if e&1 == 0 {
		return decimal.New(r.varint(), int32(exp))
	}
	sign := int(r.byte()) - 1
	mag := new(big.Int).SetBytes([]byte(r.string()))
	if sign < 0 {
		mag.Neg(mag)
	}
	return decimal.NewFromBigInt(mag, int32(exp))
}

// splitStateKey splits "W|user|start" or "C|user|start" given its prefix.
func splitStateKey(key, prefix string) (user, start string, ok bool) {
	rest, ok := strings.CutPrefix(key, prefix)
	if !ok {
		return "", "", false
	}
	i := strings.LastIndexByte(rest, '|')
	if i <= 0 {
		return "", "", false
	}
	return rest[:i], rest[i+1:], true
}
