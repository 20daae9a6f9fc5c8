package ticks

import (
	"context"

	"github.com/sluicehq/sluice/sinks/objstore"
)

// WriteSegmentForTest writes a segment file as the worker does.
func WriteSegmentForTest(ctx context.Context, store objstore.Store, symbol, date, instance, account string, start, end int64, final bool, rows []Tick) error {
	key := SegmentKey(symbol, date, start, instance)
	name, _ := ParseSegmentKey(key)
	seg := Segment{SegmentName: name, Account: account, RangeStart: start, RangeEnd: end, LastTick: rows[len(rows)-1].TimeMs, Final: final, Rows: int64(len(rows))}
	data, err := encodeSegment(seg, rows)
	if err != nil {
		return err
	}
	return store.Put(ctx, key, data, "application/vnd.apache.parquet")
}
