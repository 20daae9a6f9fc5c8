package trades

import (
	"time"
	"unicode/utf8"

	"github.com/shopspring/decimal"
)

// decodeScoredFast decodes a trade.scored record (envelope and payload)
// in one pass over value, without the intermediate maps, raw messages and
// decimal texts of DecodeEvent and DecodeTradeScored. It handles the shape
// trades-score writes: a UTF-8 JSON object with exactly the keys event_id,
// type ("trade.scored"), timestamp and payload, each once, the payload an
// object with only TradeScored's keys, each once; strings without escapes;
// no null but for the slices (labels, lot_labels, lots, a lot's labels).
// Its ok is false for anything else — another type, an unknown or repeated
// key, an escape, a null, a value of another type, a payload that fails
// rule trades.scored, malformed JSON — and the caller then decodes value
// with DecodeEvent and DecodeTradeScored, which decide every such case.
// When ok is true the result is exactly what those two give (the same
// strings, times and decimals, coefficient and exponent included).
func decodeScoredFast(value []byte) (s TradeScored, ok bool) {
	if !utf8.Valid(value) {
		return TradeScored{}, false
	}
	p := scoredParser{b: value}
	var typeOK bool
	ok = p.object(15, func(key string) (uint16, bool) {
		switch key {
		case "event_id":
			_, ok := p.str()
			return 1, ok
		case "type":
			t, ok := p.str()
			typeOK = string(t) == TypeTradeScored
			return 2, ok
		case "timestamp":
			return 4, p.time(&time.Time{})
		case "payload":
			return 8, p.payload(&s)
		}
		return 0, false
	})
	if !ok || !typeOK || !p.end() {
		return TradeScored{}, false
	}
	if CheckScoredFields(s) != nil {
		return TradeScored{}, false
	}
	return s, true
}

// scoredParser scans one JSON value for decodeScoredFast; bad sticks once
// the input leaves the handled shape.
type scoredParser struct {
	b   []byte
	off int
	bad bool
}

func (p *scoredParser) ws() {
	for p.off < len(p.b) {
		switch p.b[p.off] {
		case ' ', '\t', '\n', '\r':
			p.off++
		default:
			return
		}
	}
}

// consume skips white space and then c, reporting whether c was there.
func (p *scoredParser) consume(c byte) bool {
	p.ws()
	if p.off < len(p.b) && p.b[p.off] == c {
		p.off++
		return true
	}
	return false
}

// object reads an object whose members member reads: member is called
// with each name, reads the value and returns the name's bit (0: an
// unknown name) and whether the value was read. The object is read when
// every name is known and given once, and the bits of all make want.
func (p *scoredParser) object(want uint16, member func(key string) (uint16, bool)) bool {
	if !p.consume('{') {
		p.bad = true
		return false
	}
	var seen uint16
	if !p.consume('}') {
		for {
			key, ok := p.key()
			if !ok {
				return false
			}
			bit, ok := member(key)
			if !ok || bit == 0 || seen&bit != 0 {
				p.bad = true
				return false
			}
			seen |= bit
			if p.consume(',') {
				continue
			}
			if !p.consume('}') {
				p.bad = true
				return false
			}
			break
		}
	}
	return !p.bad && seen&want == want
}

// array reads null (false, true) or an array whose elements elem reads
// (true, true); ok is false when it is neither.
func (p *scoredParser) array(elem func() bool) (notNull, ok bool) {
	if p.null() {
		return false, true
	}
	if !p.consume('[') {
		p.bad = true
		return false, false
	}
	if p.consume(']') {
		return true, true
	}
	for {
		if !elem() {
			p.bad = true
			return false, false
		}
		if p.consume(',') {
			continue
		}
		if p.consume(']') {
			return true, true
		}
		p.bad = true
		return false, false
	}
}

// key reads a member's name and its colon.
func (p *scoredParser) key() (string, bool) {
	k, ok := p.str()
	if !ok || !p.consume(':') {
		p.bad = true
		return "", false
	}
	return string(k), true // no allocation: compared in a switch
}

// str reads a string without escapes or control characters and returns
// its bytes (a view of the input).
func (p *scoredParser) str() ([]byte, bool) {
	if !p.consume('"') {
		p.bad = true
		return nil, false
	}
	start := p.off
	for p.off < len(p.b) {
		c := p.b[p.off]
		switch {
		case c == '"':
			p.off++
			return p.b[start : p.off-1], true
		case c == '\\' || c < 0x20:
			p.bad = true
			return nil, false
		}
		p.off++
	}
	p.bad = true
	return nil, false
}

// text reads a string as a Go string; known values are shared, not
// allocated.
func (p *scoredParser) text() (string, bool) {
	b, ok := p.str()
	if !ok {
		return "", false
	}
	return internScored(b), true
}

// internScored returns b as a string, sharing the constant of a side,
// known broker or known label.
func internScored(b []byte) string {
	switch string(b) {
	case "BUY":
		return "BUY"
	case "SELL":
		return "SELL"
	case "synthetic":
		return "synthetic"
	case LabelOvertrading:
		return LabelOvertrading
	case LabelRevengeTrading:
		return LabelRevengeTrading
	case LabelSizeEscalation:
		return LabelSizeEscalation
	}
	return string(b)
}

// time reads an RFC 3339 string as encoding/json does (time.Time's
// UnmarshalJSON on the quoted text).
func (p *scoredParser) time(t *time.Time) bool {
	p.ws()
	start := p.off
	if _, ok := p.str(); !ok {
		return false
	}
	if err := t.UnmarshalJSON(p.b[start:p.off]); err != nil {
		p.bad = true
		return false
	}
	return true
}

// null consumes a JSON null if one is next.
func (p *scoredParser) null() bool {
	p.ws()
	if len(p.b)-p.off >= 4 && string(p.b[p.off:p.off+4]) == "null" {
		p.off += 4
		return true
	}
	return false
}

// decimal reads a decimal as ParseDecimal does: a string or a number.
func (p *scoredParser) decimal() (decimal.Decimal, bool) {
	p.ws()
	if p.off >= len(p.b) {
		p.bad = true
		return decimal.Decimal{}, false
	}
	var text []byte
	if p.b[p.off] == '"' {
		var ok bool
		if text, ok = p.str(); !ok {
			return decimal.Decimal{}, false
		}
	} else if text = p.number(); text == nil {
		p.bad = true
		return decimal.Decimal{}, false
	}
	if d, ok := plainDecimal(text); ok {
		return d, true
	}
	d, err := parseDecimalText(string(text))
	if err != nil {
		p.bad = true
		return decimal.Decimal{}, false
	}
	return d, true
}

// number reads a JSON number (its exact grammar) and returns its text, nil
// when none is next.
func (p *scoredParser) number() []byte {
	b, i := p.b, p.off
	digits := func() int {
		n := 0
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i, n = i+1, n+1
		}
		return n
	}
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case digits() == 0:
		return nil
	}
	if i < len(b) && b[i] == '.' {
		i++
		if digits() == 0 {
			return nil
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if digits() == 0 {
			return nil
		}
	}
	text := b[p.off:i]
	p.off = i
	return text
}

// plainDecimal parses -?digits(.digits)? of at most 17 digits without
// text: the decimal decimal.NewFromString makes of it (coefficient and
// exponent), within ParseDecimal's bounds. ok is false for any other text.
func plainDecimal(b []byte) (decimal.Decimal, bool) {
	i, neg := 0, false
	if len(b) > 0 && b[0] == '-' {
		i, neg = 1, true
	}
	var v int64
	n, exp, dot := 0, int32(0), false
	for ; i < len(b); i++ {
		c := b[i]
		switch {
		case c >= '0' && c <= '9':
			v = v*10 + int64(c-'0')
			n++
			if dot {
				exp--
			}
		case c == '.' && !dot && n > 0:
			dot = true
		default:
			return decimal.Decimal{}, false
		}
	}
	if n == 0 || n > 17 || dot && exp == 0 {
		return decimal.Decimal{}, false
	}
	if neg {
		v = -v
	}
	return decimal.New(v, exp), true
}

// labels reads an array of strings, or null (a nil slice; [] is an
// empty one, as encoding/json makes them).
func (p *scoredParser) labels() ([]string, bool) {
	var out []string
	notNull, ok := p.array(func() bool {
		l, ok := p.text()
		out = append(out, l)
		return ok
	})
	if notNull && out == nil {
		out = []string{}
	}
	return out, ok
}

// lots reads the lots array, or null.
func (p *scoredParser) lots() ([]LotPnL, bool) {
	var out []LotPnL
	notNull, ok := p.array(func() bool {
		var l LotPnL
		ok := p.object(0, func(key string) (uint16, bool) {
			switch key {
			case "qty":
				return 1, p.decimalInto(&l.Qty.Decimal)
			case "pnl":
				return 2, p.decimalInto(&l.PnL.Decimal)
			case "labels":
				return 4, p.labelsInto(&l.Labels)
			}
			return 0, false
		})
		out = append(out, l)
		return ok
	})
	if notNull && out == nil {
		out = []LotPnL{}
	}
	return out, ok
}

// payload reads a trade.scored payload object into s.
func (p *scoredParser) payload(s *TradeScored) bool {
	return p.object(0, func(key string) (uint16, bool) {
		switch key {
		case "trade_id":
			return 1 << 0, p.textInto(&s.TradeID)
		case "user_id":
			return 1 << 1, p.textInto(&s.UserID)
		case "broker":
			return 1 << 2, p.textInto(&s.Broker)
		case "ext_id":
			return 1 << 3, p.textInto(&s.ExtID)
		case "symbol":
			return 1 << 4, p.textInto(&s.Symbol)
		case "side":
			return 1 << 5, p.textInto((*string)(&s.Side))
		case "qty":
			return 1 << 6, p.decimalInto(&s.Qty.Decimal)
		case "price":
			return 1 << 7, p.decimalInto(&s.Price.Decimal)
		case "fee":
			return 1 << 8, p.decimalInto(&s.Fee.Decimal)
		case "ts":
			return 1 << 9, p.time(&s.TS)
		case "realized_pnl":
			s.RealizedPnL = &Fixed8{}
			return 1 << 10, p.decimalInto(&s.RealizedPnL.Decimal)
		case "lot_labels":
			return 1 << 11, p.labelsInto(&s.LotLabels)
		case "labels":
			return 1 << 12, p.labelsInto(&s.Labels)
		case "lots":
			var ok bool
			s.Lots, ok = p.lots()
			return 1 << 13, ok
		}
		return 0, false
	})
}

func (p *scoredParser) textInto(dst *string) (ok bool) {
	*dst, ok = p.text()
	return ok
}

func (p *scoredParser) decimalInto(dst *decimal.Decimal) (ok bool) {
	*dst, ok = p.decimal()
	return ok
}

func (p *scoredParser) labelsInto(dst *[]string) (ok bool) {
	*dst, ok = p.labels()
	return ok
}

// end reports whether only white space follows.
func (p *scoredParser) end() bool {
	p.ws()
	return p.off == len(p.b)
}
