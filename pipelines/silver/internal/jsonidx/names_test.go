package jsonidx

import (
	"fmt"
	"strings"
	"testing"
)

func TestNames(t *testing.T) {
	t.Parallel()
	sets := [][]string{
		nil,
		{""},
		{"payload", "task_id", "first_seen", "task_type"},
		{"a", "b", "ab", "ba", "aa", "bb", "a.b", "é", "日本", "x_______________________________y"},
	}
	var full []string // 255 names: the table is full but for one slot, so most lookups probe
	for i := range maxNames {
		full = append(full, fmt.Sprintf("n%03d", i))
	}
	sets = append(sets, full)
	for _, names := range sets {
		n := NewNames(names...)
		if n.Len() != len(names) {
			t.Fatalf("Len = %d, want %d", n.Len(), len(names))
		}
		in := map[string]bool{}
		for k, name := range names {
			in[name] = true
			if got := n.Index([]byte(name)); got != k {
				t.Errorf("Index(%q) = %d, want %d", name, got, k)
			}
			if got := n.Name(k); got != name {
				t.Errorf("Name(%d) = %q, want %q", k, got, name)
			}
		}
		for _, other := range []string{"", "payloa", "payloadd", "Payload", "c", "n255", "n00", "n0000", "\xff", strings.Repeat("a", 300)} {
			if !in[other] && n.Index([]byte(other)) != -1 {
				t.Errorf("Index(%q) = %d, want -1", other, n.Index([]byte(other)))
			}
		}
	}
}

func TestNewNamesRefuses(t *testing.T) {
	t.Parallel()
	var many []string // distinct, one too many
	for i := range maxNames + 1 {
		many = append(many, fmt.Sprint(i))
	}
	for name, names := range map[string][]string{
		"repeated":       {"a", "b", "a"},
		"repeated empty": {"", ""},
		"not UTF-8":      {"a\xff"},
		"256 names":      many,
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: NewNames did not panic", name)
				}
			}()
			NewNames(names...)
		}()
	}
}
