package silver

import (
	"fmt"

	"github.com/sluicehq/sluice/stages/run"
)

// The silver sink is a run.EncodedKeyer: a row's encoding holds its key
// (an sa row's url_canonical, a ta row's symbol and trade date), so a
// coalescing window keeps no copy of it (a tenth of the window's bytes in
// the benchmark).
var _ run.EncodedKeyer = (*router)(nil)

// AppendEncodedKey implements run.EncodedKeyer: it appends MergeKey of the
// row encoded in enc, reading only what the key needs.
func (r *router) AppendEncodedKey(dst, enc []byte) ([]byte, error) {
	if len(enc) == 0 {
		return dst, errCorruptRow
	}
	d := rowDecoder{b: enc, pos: 1, view: true}
	switch enc[0] {
	case rowEmpty:
		return dst, nil
	case rowTA:
		sym, date, _ := d.taKey()
		d.strings()
		s := d.take(sym)
		if d.err != nil {
			return dst, d.err
		}
		return appendTAKey(dst, &TARow{Symbol: s, TradeDate: date}), nil
	case rowSA:
		url := d.saURL()
		d.strings()
		u := d.take(url)
		if d.err != nil {
			return dst, d.err
		}
		return append(dst, u...), nil
	}
	return dst, fmt.Errorf("%w: tag %d", errCorruptRow, enc[0])
}

// saURL reads the columns of an sa row (after its tag), as sa does, and
// returns the length of its url_canonical, the first of its strings.
func (d *rowDecoder) saURL() int {
	url := d.str()
	d.str()
	d.time()
	d.time()
	for range 3 {
		d.optStr()
	}
	d.str()
	d.strs()
	d.optStr()
	d.strs()
	var f float64
	for range 3 {
		d.optFloat(&f)
	}
	d.byte()
	d.time()
	return url
}
