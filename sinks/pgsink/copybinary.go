package pgsink

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"time"

	"github.com/jackc/pgx/v5"
)

// Binary COPY: a Table with AppendCopy set has its rows sent with
// COPY … FROM STDIN (FORMAT binary), each row encoded once by AppendCopy
// straight into the stream, instead of Values' boxed values encoded by pgx
// (a type lookup and an allocation or more per value, and a round trip to
// describe the table per COPY). The Append* functions below encode values
// the way pgx does for the column types they name; AppendCopy must encode
// each column in its type's binary format exactly: the server refuses a
// mismatch (SQLSTATE 22P03, incorrect binary data format), which rejects
// the rows like any refused row.

// pgEpoch is 2000-01-01 00:00 UTC, the origin of PostgreSQL's binary date
// and timestamp values, as Unix seconds.
const pgEpoch = 946_684_800

// AppendNull appends a NULL column.
func AppendNull(dst []byte) []byte { return binary.BigEndian.AppendUint32(dst, math.MaxUint32) }

// AppendText appends a text (or varchar, citext) column.
func AppendText(dst []byte, s string) []byte {
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(s)))
	return append(dst, s...)
}

// AppendTextPtr appends a nullable text column (nil: NULL).
func AppendTextPtr(dst []byte, s *string) []byte {
	if s == nil {
		return AppendNull(dst)
	}
	return AppendText(dst, *s)
}

// AppendFloat8 appends a double precision column.
func AppendFloat8(dst []byte, f float64) []byte {
	dst = binary.BigEndian.AppendUint32(dst, 8)
	return binary.BigEndian.AppendUint64(dst, math.Float64bits(f))
}

// AppendFloat8Ptr appends a nullable double precision column (nil: NULL).
func AppendFloat8Ptr(dst []byte, f *float64) []byte {
	if f == nil {
		return AppendNull(dst)
	}
	return AppendFloat8(dst, *f)
}

// AppendInt8 appends a bigint column.
func AppendInt8(dst []byte, v int64) []byte {
	dst = binary.BigEndian.AppendUint32(dst, 8)
	return binary.BigEndian.AppendUint64(dst, uint64(v))
}

// AppendBoolPtr appends a nullable boolean column (nil: NULL).
func AppendBoolPtr(dst []byte, b *bool) []byte {
	if b == nil {
		return AppendNull(dst)
	}
	dst = binary.BigEndian.AppendUint32(dst, 1)
	if *b {
		return append(dst, 1)
	}
	return append(dst, 0)
}

// AppendDate appends a date column: t's year, month and day in t's own
// location, as pgx encodes a time.Time for a date.
func AppendDate(dst []byte, t time.Time) []byte {
	day := time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC).Unix()
	dst = binary.BigEndian.AppendUint32(dst, 4)
	return binary.BigEndian.AppendUint32(dst, uint32(int32((day-pgEpoch)/86400)))
}

// AppendTimestamptz appends a timestamptz column: t's instant in whole
// microseconds (the nanoseconds below truncated), as pgx encodes it.
func AppendTimestamptz(dst []byte, t time.Time) []byte {
	us := (t.Unix()-pgEpoch)*1_000_000 + int64(t.Nanosecond())/1000
	dst = binary.BigEndian.AppendUint32(dst, 8)
	return binary.BigEndian.AppendUint64(dst, uint64(us))
}

// AppendTextArray appends a text[] column: nil is NULL, an empty slice the
// empty array '{}'.
func AppendTextArray(dst []byte, ss []string) []byte {
	if ss == nil {
		return AppendNull(dst)
	}
	const textOID = 25
	start := len(dst)
	dst = binary.BigEndian.AppendUint32(dst, 0) // the length, set below
	if len(ss) == 0 {
		dst = binary.BigEndian.AppendUint32(dst, 0) // dimensions
		dst = binary.BigEndian.AppendUint32(dst, 0) // has NULLs
		dst = binary.BigEndian.AppendUint32(dst, textOID)
	} else {
		dst = binary.BigEndian.AppendUint32(dst, 1)
		dst = binary.BigEndian.AppendUint32(dst, 0)
		dst = binary.BigEndian.AppendUint32(dst, textOID)
		dst = binary.BigEndian.AppendUint32(dst, uint32(len(ss)))
		dst = binary.BigEndian.AppendUint32(dst, 1) // lower bound
		for _, s := range ss {
			dst = AppendText(dst, s)
		}
	}
	binary.BigEndian.PutUint32(dst[start:], uint32(len(dst)-start-4))
	return dst
}

// copyBinary writes gs into table with a binary COPY of the rows
// AppendCopy encodes.
func (s *Sink[T]) copyBinary(ctx context.Context, tx pgx.Tx, table pgx.Identifier, gs []*group[T]) (int64, error) {
	sql := fmt.Sprintf("COPY %s (%s) FROM STDIN (FORMAT binary)", table.Sanitize(), identList(s.table.Columns))
	r := &copyReader[T]{gs: gs, enc: s.table.AppendCopy, cols: uint16(len(s.table.Columns))}
	tag, err := tx.Conn().PgConn().CopyFrom(ctx, r, sql)
	return tag.RowsAffected(), err
}

// copyReader is the io.Reader of a binary COPY: the header, the rows of gs
// encoded a chunk of about copyChunk bytes at a time, the trailer.
type copyReader[T any] struct {
	gs   []*group[T]
	enc  func([]byte, T) []byte
	cols uint16
	next int // next row to encode
	buf  []byte
	off  int // read position in buf
	end  bool
}

const copyChunk = 64 << 10

// copySignature starts a binary COPY stream, followed by the flags and the
// header extension length (both 0).
const copySignature = "PGCOPY\n\xff\r\n\x00"

func (r *copyReader[T]) Read(p []byte) (int, error) {
	for r.off == len(r.buf) {
		if r.end {
			return 0, io.EOF
		}
		r.fill()
	}
	n := copy(p, r.buf[r.off:])
	r.off += n
	return n, nil
}

func (r *copyReader[T]) fill() {
	r.buf, r.off = r.buf[:0], 0
	if r.buf == nil {
		r.buf = make([]byte, 0, copyChunk+copyChunk/4)
		r.buf = append(r.buf, copySignature...)
		r.buf = binary.BigEndian.AppendUint64(r.buf, 0)
	}
	for r.next < len(r.gs) && len(r.buf) < copyChunk {
		r.buf = binary.BigEndian.AppendUint16(r.buf, r.cols)
		r.buf = r.enc(r.buf, r.gs[r.next].row)
		r.next++
	}
	if r.next == len(r.gs) {
		r.buf = binary.BigEndian.AppendUint16(r.buf, math.MaxUint16) // the trailer: -1
		r.end = true
	}
}
