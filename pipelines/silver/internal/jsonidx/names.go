package jsonidx

import (
	"encoding/binary"
	"fmt"
	"math"
	"unicode/utf8"
)

// maxNames is the largest number of names of a Names set: the table keeps
// an empty slot.
const maxNames = 255

// Names is a set of member names, each known by its index: its position
// in the list given to [NewNames]. It is immutable and safe for concurrent
// use.
//
// A lookup does not allocate: the name is read as two overlapping words
// (its first and last eight bytes, or four, or its bytes), which are
// hashed into a 256-slot open-addressing table whose entries hold the same
// words, so that a name of up to 16 bytes is found, barring collisions, in
// one probe and three comparisons (length and words).
type Names struct {
	table [256]entry
	names []string
	bytes [][]byte // the names as bytes, by index
}

// An entry of the table of a Names set.
type entry struct {
	a, z uint64 // the name's words (see words)
	n    uint32 // the name's length; empty for an empty slot
	k    uint32 // the name's index
}

// empty is the length of an empty slot (no name is that long).
const empty = math.MaxUint32

// NewNames returns the set of names, name i having index i. It panics when
// a name is repeated or is not valid UTF-8, or for more than 255 names:
// the sets are fixed by the program.
func NewNames(names ...string) *Names {
	if len(names) > maxNames {
		panic(fmt.Sprintf("jsonidx: %d names, at most %d", len(names), maxNames))
	}
	n := &Names{names: append([]string(nil), names...)}
	for h := range n.table {
		n.table[h].n = empty
	}
	for k, name := range names {
		if !utf8.ValidString(name) || len(name) >= empty {
			panic(fmt.Sprintf("jsonidx: name %q is not valid UTF-8", name))
		}
		if n.Index([]byte(name)) >= 0 {
			panic(fmt.Sprintf("jsonidx: name %q repeated", name))
		}
		a, z := words([]byte(name))
		h := hash(a, z, len(name))
		for n.table[h].n != empty {
			h++ // wraps around: a uint8
		}
		n.table[h] = entry{a: a, z: z, n: uint32(len(name)), k: uint32(k)}
		n.bytes = append(n.bytes, []byte(name))
	}
	return n
}

// Len is the number of names.
func (n *Names) Len() int { return len(n.names) }

// Name returns the name of index k.
func (n *Names) Name(k int) string { return n.names[k] }

// Index returns the index of name, or -1 when name is not in the set.
func (n *Names) Index(name []byte) int {
	a, z := words(name)
	l := len(name)
probe:
	for h := hash(a, z, l); ; h++ {
		e := &n.table[h]
		if int(e.n) != l || e.a != a || e.z != z {
			if e.n == empty {
				return -1
			}
			continue
		}
		// The words hold all of a name of up to 16 bytes; compare the
		// middle of a longer one word by word (no call: Index stays a
		// leaf function).
		if l > 16 {
			known := n.bytes[e.k]
			for i := 8; i < l-8; i += 8 {
				if binary.LittleEndian.Uint64(name[i:]) != binary.LittleEndian.Uint64(known[i:]) {
					continue probe
				}
			}
		}
		return int(e.k)
	}
}

// words returns two words that hold all of name when it is at most 16
// bytes long: its first and last eight bytes (they overlap when it is
// shorter than 16), or its first and last four, or its first, middle and
// last byte.
func words(name []byte) (a, z uint64) {
	switch l := len(name); {
	case l >= 8:
		return binary.LittleEndian.Uint64(name), binary.LittleEndian.Uint64(name[l-8:])
	case l >= 4:
		return uint64(binary.LittleEndian.Uint32(name)), uint64(binary.LittleEndian.Uint32(name[l-4:]))
	case l > 0:
		return uint64(name[0]) | uint64(name[l/2])<<8 | uint64(name[l-1])<<16, 0
	}
	return 0, 0
}

// hash mixes the words and the length of a name into a slot (Fibonacci
// hashing: the top byte of the product).
func hash(a, z uint64, l int) uint8 {
	return uint8(((a ^ z<<5 ^ uint64(l)) * 0x9E3779B97F4A7C15) >> 56)
}
