package objstore

import (
	"fmt"
	"strings"
)

// ValidKey reports whether key is acceptable to every Store: non-empty,
// slash-separated, relative (no leading "/"), without empty, "." or ".."
// segments, without backslashes or NUL bytes, and not ending in ".tmp"
// (reserved for the directory store's in-progress writes).
func ValidKey(key string) error {
	switch {
	case key == "":
		return fmt.Errorf("objstore: empty key")
	case strings.HasPrefix(key, "/"):
		return fmt.Errorf("objstore: key %q is absolute", key)
	case strings.ContainsAny(key, "\\\x00"):
		return fmt.Errorf("objstore: key %q contains a backslash or NUL", key)
	case strings.HasSuffix(key, ".tmp"):
		return fmt.Errorf("objstore: key %q ends in the reserved suffix .tmp", key)
	}
	for _, seg := range strings.Split(key, "/") {
		switch seg {
		case "", ".", "..":
			return fmt.Errorf("objstore: key %q has an empty, \".\" or \"..\" segment", key)
		}
	}
	return nil
}

// validPrefix accepts "" or a prefix whose complete segments are valid; the
// last segment may be partial or empty (a prefix ending in "/").
func validPrefix(prefix string) error {
	if prefix == "" {
		return nil
	}
	if strings.HasPrefix(prefix, "/") || strings.ContainsAny(prefix, "\\\x00") {
		return fmt.Errorf("objstore: invalid prefix %q", prefix)
	}
	segs := strings.Split(prefix, "/")
	for i, seg := range segs {
		if seg == ".." || (i < len(segs)-1 && (seg == "" || seg == ".")) {
			return fmt.Errorf("objstore: invalid prefix %q", prefix)
		}
	}
	return nil
}
