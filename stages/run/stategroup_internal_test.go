package run

import (
	"slices"
	"strings"
	"testing"
)

// A store with StoreConfig.Group ranges over a group's keys only when the
// prefix names a group, with the same result as a scan of every key; a
// tombstoned key leaves its group once its record is produced, and any
// other prefix still scans every key.
func TestStoreGroupRange(t *testing.T) {
	t.Parallel()
	group := func(key string) string {
		f := strings.SplitN(key, "|", 3)
		switch {
		case f[0] == "T" && len(f) == 3:
			return "T|" + f[1] + "|"
		case f[0] == "W" && len(f) > 1:
			return "W|"
		}
		return "" // "T|" names no group: its keys are in several
	}
	codec := StoreConfig[string]{Name: "g", Topic: "g.changelog",
		Encode: func(v string) ([]byte, error) { return []byte(v), nil },
		Decode: func(b []byte) (string, error) { return string(b), nil }}
	withGroup := codec
	withGroup.Group = group
	keys := []string{"T|u1|a", "T|u1|b", "T|u2|a", "T|u10|a", "W|u1|2025-01-06", "W|u2|2025-01-06"}
	parts := map[string]*Partition[string]{}
	for name, cfg := range map[string]StoreConfig[string]{"scan": codec, "group": withGroup} {
		s, err := NewStore(cfg)
		if err != nil {
			t.Fatal(err)
		}
		p := s.newPartition(tp{"in", 0}, false, nil).(*Partition[string])
		for _, k := range keys {
			if err := p.Put(k, "v:"+k); err != nil {
				t.Fatal(err)
			}
		}
		parts[name] = p
	}
	rangeKeys := func(p *Partition[string], prefix string) []string {
		var out []string
		p.Range(prefix, func(k, v string) bool {
			if v != "v:"+k {
				t.Errorf("%s = %q", k, v)
			}
			out = append(out, k)
			return true
		})
		return out
	}
	for _, prefix := range []string{"T|u1|", "T|u2|", "W|", "T|", "", "T|u1|b", "X|"} {
		got, want := rangeKeys(parts["group"], prefix), rangeKeys(parts["scan"], prefix)
		if !slices.Equal(got, want) {
			t.Errorf("Range(%q) with groups = %v, without = %v", prefix, got, want)
		}
	}
	if got := rangeKeys(parts["group"], "T|u1|"); !slices.Equal(got, []string{"T|u1|a", "T|u1|b"}) {
		t.Errorf("Range(T|u1|) = %v", got)
	}
	p := parts["group"]
	if err := p.Delete("T|u1|a"); err != nil {
		t.Fatal(err)
	}
	if got := rangeKeys(p, "T|u1|"); !slices.Equal(got, []string{"T|u1|b"}) {
		t.Errorf("after the delete Range(T|u1|) = %v", got)
	}
	if _, err := p.changes(); err != nil {
		t.Fatal(err)
	}
	if _, ok := p.groups["T|u1|"]["T|u1|a"]; ok || len(p.groups["T|u1|"]) != 1 {
		t.Errorf("group T|u1| after the tombstone was produced: %v", p.groups["T|u1|"])
	}
}
