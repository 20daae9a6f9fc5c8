package ticks

import (
	"bytes"
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/parquet-go/parquet-go"

	"github.com/sluicehq/sluice/sinks/objstore"
)

// Key/value metadata of a segment file.
const (
	MetaRangeStart = "sluice.range_start"     // first ms covered (inclusive)
	MetaRangeEnd   = "sluice.range_end"       // last ms covered (inclusive)
	MetaLastTick   = "sluice.last_tick_ts"    // time of the last tick
	MetaFinal      = "sluice.final"           // "true" when the range was exhausted
	MetaInstance   = "sluice.job_instance_id" // writer instance
	MetaSymbol     = "sluice.symbol"
	MetaDate       = "sluice.date"
	MetaAccount    = "sluice.account_id"
)

// SegmentPrefix is the object key prefix of a job's segment files.
func SegmentPrefix(symbol, date string) string { return "ticks/" + symbol + "/" + date + "/" }

// SegmentKey is the object key of a segment file:
// ticks/{symbol}/{date}/part_{start_ts}_{instance}.parquet.
func SegmentKey(symbol, date string, start int64, instance string) string {
	return fmt.Sprintf("%spart_%d_%s.parquet", SegmentPrefix(symbol, date), start, instance)
}

// SegmentName is a segment file's key parsed.
type SegmentName struct {
	Key, Symbol, Date, Instance string
	Start                       int64
}

// ParseSegmentKey parses a key made by SegmentKey.
func ParseSegmentKey(key string) (SegmentName, error) {
	parts := strings.Split(key, "/")
	if len(parts) != 4 || parts[0] != "ticks" || !strings.HasPrefix(parts[3], "part_") || !strings.HasSuffix(parts[3], ".parquet") {
		return SegmentName{}, fmt.Errorf("segment key %q: want ticks/SYMBOL/DATE/part_START_INSTANCE.parquet", key)
	}
	mid := strings.TrimSuffix(strings.TrimPrefix(parts[3], "part_"), ".parquet")
	ts, inst, ok := strings.Cut(mid, "_")
	start, err := strconv.ParseInt(ts, 10, 64)
	if !ok || err != nil || inst == "" {
		return SegmentName{}, fmt.Errorf("segment key %q: bad part name", key)
	}
	return SegmentName{Key: key, Symbol: parts[1], Date: parts[2], Instance: inst, Start: start}, nil
}

// Segment is a decoded segment file's metadata.
type Segment struct {
	SegmentName
	RangeStart, RangeEnd, LastTick int64
	Final                          bool
	Rows                           int64
	Account                        string
}

// encodeSegment writes ticks as a Parquet file with the covered range in its
// key/value metadata.
func encodeSegment(seg Segment, rows []Tick) ([]byte, error) {
	var buf bytes.Buffer
	err := parquet.Write(&buf, rows,
		parquet.KeyValueMetadata(MetaRangeStart, strconv.FormatInt(seg.RangeStart, 10)),
		parquet.KeyValueMetadata(MetaRangeEnd, strconv.FormatInt(seg.RangeEnd, 10)),
		parquet.KeyValueMetadata(MetaLastTick, strconv.FormatInt(seg.LastTick, 10)),
		parquet.KeyValueMetadata(MetaFinal, strconv.FormatBool(seg.Final)),
		parquet.KeyValueMetadata(MetaInstance, seg.Instance),
		parquet.KeyValueMetadata(MetaSymbol, seg.Symbol),
		parquet.KeyValueMetadata(MetaDate, seg.Date),
		parquet.KeyValueMetadata(MetaAccount, seg.Account),
	)
	if err != nil {
		return nil, fmt.Errorf("encode parquet segment %s: %w", seg.Key, err)
	}
	return buf.Bytes(), nil
}

// DecodeSegment reads a segment file's metadata and, when withRows, its
// ticks. It fails on a file that is not a readable segment.
func DecodeSegment(key string, data []byte, withRows bool) (Segment, []Tick, error) {
	name, err := ParseSegmentKey(key)
	if err != nil {
		return Segment{}, nil, err
	}
	f, err := parquet.OpenFile(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		return Segment{}, nil, fmt.Errorf("segment %s: %w", key, err)
	}
	seg := Segment{SegmentName: name, Rows: f.NumRows()}
	num := func(k string) (int64, error) {
		v, ok := f.Lookup(k)
		if !ok {
			return 0, fmt.Errorf("segment %s: no %s metadata", key, k)
		}
		return strconv.ParseInt(v, 10, 64)
	}
	if seg.RangeStart, err = num(MetaRangeStart); err != nil {
		return Segment{}, nil, err
	}
	if seg.RangeEnd, err = num(MetaRangeEnd); err != nil {
		return Segment{}, nil, err
	}
	if seg.LastTick, err = num(MetaLastTick); err != nil {
		return Segment{}, nil, err
	}
	fin, _ := f.Lookup(MetaFinal)
	seg.Final = fin == "true"
	seg.Account, _ = f.Lookup(MetaAccount)
	if !withRows {
		return seg, nil, nil
	}
	rows, err := parquet.Read[Tick](bytes.NewReader(data), int64(len(data)))
	if err != nil {
		return Segment{}, nil, fmt.Errorf("segment %s: read rows: %w", key, err)
	}
	return seg, rows, nil
}

// ListSegments returns the readable segment files of a job sorted by range
// start (then key). Unreadable files and foreign keys are reported in bad.
func ListSegments(ctx context.Context, store objstore.Store, symbol, date string) (segs []Segment, bad []string, err error) {
	infos, err := store.List(ctx, SegmentPrefix(symbol, date))
	if err != nil {
		return nil, nil, err
	}
	for _, in := range infos {
		if _, err := ParseSegmentKey(in.Key); err != nil {
			bad = append(bad, in.Key)
			continue
		}
		data, err := store.Get(ctx, in.Key)
		if err != nil {
			return nil, nil, err
		}
		seg, _, err := DecodeSegment(in.Key, data, false)
		if err != nil || seg.Rows == 0 {
			bad = append(bad, in.Key)
			continue
		}
		segs = append(segs, seg)
	}
	sort.Slice(segs, func(i, j int) bool {
		if segs[i].RangeStart != segs[j].RangeStart {
			return segs[i].RangeStart < segs[j].RangeStart
		}
		return segs[i].Key < segs[j].Key
	})
	return segs, bad, nil
}

// ReadTicks returns every tick of a job's segment files, in file order
// (for tests, checks and exports).
func ReadTicks(ctx context.Context, store objstore.Store, symbol, date string) ([]Tick, []Segment, error) {
	segs, bad, err := ListSegments(ctx, store, symbol, date)
	if err != nil {
		return nil, nil, err
	}
	if len(bad) > 0 {
		return nil, nil, fmt.Errorf("unreadable segment files: %v", bad)
	}
	var all []Tick
	for _, s := range segs {
		data, err := store.Get(ctx, s.Key)
		if err != nil {
			return nil, nil, err
		}
		_, rows, err := DecodeSegment(s.Key, data, true)
		if err != nil {
			return nil, nil, err
		}
		all = append(all, rows...)
	}
	return all, segs, nil
}
