package modules

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/big"
	"slices"
	"strconv"
	"strings"
)

// InputHash is the content hash of a module's upstream payload as one
// analyzer version sees it: hex SHA-256 of module, '|', analyzerVersion,
// '|' and the payload's canonical JSON (see CanonicalJSON). Payloads that
// differ only in formatting, member order or number spelling hash alike,
// so a refresh that brings nothing new reuses the stored analysis. A
// payload over MaxPayloadBytes fails modules.snapshot_too_large; one that
// is not JSON is an upstream answer no retry changes, modules.upstream_rejected.
func InputHash(module, analyzerVersion string, payload []byte) (string, error) {
	if err := CheckPayloadSize(len(payload)); err != nil {
		return "", err
	}
	canon, err := CanonicalJSON(payload)
	if err != nil {
		return "", UpstreamRejected(fmt.Errorf("%s payload: %w", module, err))
	}
	h := sha256.New()
	io.WriteString(h, module)
	io.WriteString(h, "|")
	io.WriteString(h, analyzerVersion)
	io.WriteString(h, "|")
	h.Write(canon)
	return hex.EncodeToString(h.Sum(nil)), nil
}

// CanonicalJSON re-encodes one JSON value canonically: no insignificant
// white space; object members sorted by name (byte order), a repeated name
// keeping its last value; strings as encoding/json writes them without
// HTML escaping; numbers by value: an integer literal as its decimal
// digits, any other number as its float64 — as an integer when it is a
// whole number of magnitude below 2^53, else in the shortest form that
// reads back (strconv 'g') — so 1, 1.0, 1e0 and 10e-1 are all 1. A number
// beyond float64's range keeps its literal.
func CanonicalJSON(b []byte) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("canonical JSON: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("canonical JSON: data after the value")
	}
	var out bytes.Buffer
	if err := writeCanonical(&out, v); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

func writeCanonical(out *bytes.Buffer, v any) error {
	switch x := v.(type) {
	case nil:
		out.WriteString("null")
	case bool:
		out.WriteString(strconv.FormatBool(x))
	case json.Number:
		out.WriteString(canonicalNumber(string(x)))
	case string:
		return writeString(out, x)
	case []any:
		out.WriteByte('[')
		for i, e := range x {
			if i > 0 {
				out.WriteByte(',')
			}
			if err := writeCanonical(out, e); err != nil {
				return err
			}
		}
		out.WriteByte(']')
	case map[string]any:
		names := make([]string, 0, len(x))
		for k := range x {
			names = append(names, k)
		}
		slices.Sort(names)
		out.WriteByte('{')
		for i, k := range names {
			if i > 0 {
				out.WriteByte(',')
			}
			if err := writeString(out, k); err != nil {
				return err
			}
			out.WriteByte(':')
			if err := writeCanonical(out, x[k]); err != nil {
				return err
			}
		}
		out.WriteByte('}')
	default:
		return fmt.Errorf("canonical JSON: unexpected %T", v)
	}
	return nil
}

func writeString(out *bytes.Buffer, s string) error {
	enc := json.NewEncoder(out)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(s); err != nil {
		return fmt.Errorf("canonical JSON: %w", err)
	}
	out.Truncate(out.Len() - 1) // Encode's newline
	return nil
}

// maxExactFloat is 2^53: below it, every whole float64 is an exact integer.
const maxExactFloat = 1 << 53

func canonicalNumber(lit string) string {
	if !strings.ContainsAny(lit, ".eE") {
		var n big.Int
		if _, ok := n.SetString(lit, 10); ok {
			return n.String()
		}
		return lit
	}
	f, err := strconv.ParseFloat(lit, 64)
	if err != nil { // out of range
		return lit
	}
	if f == math.Trunc(f) && math.Abs(f) < maxExactFloat {
		return strconv.FormatInt(int64(f), 10)
	}
	return strconv.FormatFloat(f, 'g', -1, 64)
}
