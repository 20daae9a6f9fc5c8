package jsonidx

import (
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"
)

// The scanner that collects every member of an object: the reference the
// tests compare Index with. Its names are exported for the external tests
// (package jsonidx_test), which use silver's corpus generator.

// MaxDepth is the nesting bound of the scanner.
const MaxDepth = maxDepth

// Member is one name/value pair of a JSON object; Raw aliases the input.
type Member struct {
	Key []byte // the decoded name (U+FFFD for what is not text, as encoding/json)
	Raw []byte // the value's JSON text, without surrounding whitespace
}

// object scans the object starting at s.b[i] == '{'. When members is not
// nil, each member is appended to *members; when the member named nested
// holds an object, its own members go to *nestedMembers (one level only).
func (s *scanner) object(i int, members *[]Member, nested string, nestedMembers *[]Member) (int, error) {
	s.depth++
	if s.depth > maxDepth {
		return i, errors.New("exceeded max depth")
	}
	defer func() { s.depth-- }()
	i = s.ws(i + 1)
	if i < len(s.b) && s.b[i] == '}' {
		return i + 1, nil
	}
	for {
		if i >= len(s.b) || s.b[i] != '"' {
			return i, s.errAt(i, "looking for beginning of object key string")
		}
		kstart := i
		end, flags, err := s.str(i)
		if err != nil {
			return end, err
		}
		var key []byte
		if members != nil {
			key = s.b[kstart+1 : end-1]
			if flags&strEscaped != 0 || !utf8.Valid(key) {
				// As encoding/json decodes names: U+FFFD for what is not
				// text (DecodeString refuses it).
				var k string
				if err := json.Unmarshal(s.b[kstart:end], &k); err != nil {
					return end, err
				}
				key = []byte(k)
			}
		}
		i = s.ws(end)
		if i >= len(s.b) || s.b[i] != ':' {
			return i, s.errAt(i, "after object key")
		}
		i = s.ws(i + 1)
		vstart := i
		if nestedMembers != nil && string(key) == nested && i < len(s.b) && s.b[i] == '{' {
			*nestedMembers = (*nestedMembers)[:0] // a duplicate name: the last one wins
			i, err = s.object(i, nestedMembers, "", nil)
		} else {
			i, err = s.value(i)
		}
		if err != nil {
			return i, err
		}
		if members != nil {
			*members = append(*members, Member{Key: key, Raw: s.b[vstart:i]})
		}
		i = s.ws(i)
		if i >= len(s.b) {
			return i, s.errAt(i, "")
		}
		switch s.b[i] {
		case ',':
			i = s.ws(i + 1)
		case '}':
			return i + 1, nil
		default:
			return i, s.errAt(i, "after object key:value pair")
		}
	}
}

// ScanObject validates that b is exactly one JSON object (whitespace
// around it allowed) and returns its members in order; when nested is not
// "", the members of the object held by the member named nested are
// returned too (nil when that member is absent or not an object).
func ScanObject(b []byte, nested string) (members, nestedMembers []Member, err error) {
	s := scanner{b: b}
	i := s.ws(0)
	if i >= len(b) {
		return nil, nil, errors.New("unexpected end of JSON input")
	}
	if b[i] != '{' {
		// Say "not an object" only for otherwise valid JSON.
		end, err := s.value(i)
		if err != nil {
			return nil, nil, err
		}
		if end = s.ws(end); end < len(b) {
			return nil, nil, s.errAt(end, "after top-level value")
		}
		return nil, nil, fmt.Errorf("%w: %s", ErrNotObject, KindOf(b[i:]))
	}
	members = make([]Member, 0, 16)
	var nm *[]Member
	if nested != "" {
		nestedMembers = make([]Member, 0, 16)
		nm = &nestedMembers
	}
	end, err := s.object(i, &members, nested, nm)
	if err != nil {
		return nil, nil, err
	}
	if end = s.ws(end); end < len(b) {
		return nil, nil, s.errAt(end, "after top-level value")
	}
	return members, nestedMembers, nil
}

// Lookup returns the value of the last member named name (encoding/json
// keeps the last of duplicate names) and whether it exists.
func Lookup(ms []Member, name string) ([]byte, bool) {
	for i := len(ms) - 1; i >= 0; i-- {
		if string(ms[i].Key) == name {
			return ms[i].Raw, true
		}
	}
	return nil, false
}
