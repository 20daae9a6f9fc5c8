// Package jsonidx indexes a JSON object in one pass and decodes the values
// it locates, without allocating on the common path. It is the JSON layer
// of the silver pipeline, which runs it on every bronze record: where
// encoding/json would validate a record and then decode it (two passes),
// allocating a map and a copy of every value, Index validates the record
// and records where the members with known names are, as sub-slices of the
// input. It knows nothing of silver's fields or rules.
//
// # What it scans
//
// [Index] accepts exactly one JSON object, with whitespace around it, with
// RFC 8259's grammar as encoding/json accepts it, nested at most 10 000
// levels deep, in an input shorter than 4 GiB. For each member whose name
// is in a [Names] set it records a [Span] of the member's value (without
// the surrounding whitespace); of duplicate names the last one wins, as in
// encoding/json. The object value of one member can be indexed in the same
// pass ([Nested]), so that an envelope and its payload are read once.
// [Elements] walks the elements of an array the same way. Syntax errors
// read like encoding/json's ("invalid character 'x' at offset 7: after
// object key", "unexpected end of JSON input"); valid JSON that is not an
// object is an error wrapping [ErrNotObject].
//
// # Text
//
// Scanning checks the structure of strings (quotes, escapes, no raw
// control characters) but refuses neither bytes that are not UTF-8 nor
// \u escapes that do not pair up, so that a member nobody reads is never
// refused for its bytes. It notes, while it reads them, which recorded
// values are plain strings (no escapes, valid UTF-8: their value is the
// bytes between the quotes, which [Span.Text] returns without reading
// them again). Any other string is checked when it is decoded
// ([DecodeString], [StringBytes]): one that is not text, i.e. that holds
// invalid UTF-8 (UTF-8-encoded surrogates included) or a \uD800–\uDFFF
// escape that is not part of a surrogate pair (a \uD800–\uDBFF escape
// directly followed by a \uDC00–\uDFFF one), is an error wrapping
// [ErrInvalidText], where encoding/json would put U+FFFD in place of what
// it cannot decode. A member name that is not text matches no name of a
// [Names] set.
//
// # Numbers
//
// The scanner accepts JSON numbers only:
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? (no "+1", ".5", "1.",
// "01", NaN or Infinity). [ParseFloat] gives the nearest float64, as
// strconv.ParseFloat does; a value beyond float64's range is an error,
// one that underflows to a denormal or to zero is not. [ParseInt] takes an
// integer value in any spelling ("1000", "1e3", "1000.0", "1.0e3") that
// fits an int64; "1.5" or "1e-1" is [ErrNotInteger], a larger magnitude
// [ErrIntRange]. (Their messages name PostgreSQL's DOUBLE PRECISION and
// BIGINT, the types silver stores the values as.)
//
// # Times
//
// [ParseTime] takes exactly RFC 3339's date-time, truncated to
// microseconds; [ParseDate] takes YYYY-MM-DD as time.Parse does.
//
// # Cost and safety
//
// Index of valid JSON whose member names hold no escape, Names.Index,
// KindOf, Present, Span.Text, StringBytes of a string without escapes, ParseFloat of
// a decimal of at most 15 digits without exponent, ParseInt of an integer
// of at most 18 digits, ParseTime of an upper-case RFC 3339 time in UTC
// ("Z") and ParseDate of a YYYY-MM-DD date do not allocate. The package
// has no state: everything is safe for concurrent use, and a [Names] set
// is immutable once built.
package jsonidx
