package objstore

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Key limits every Store accepts: S3 refuses keys longer than 1024 bytes,
// and MinIO and the directory store refuse path segments (file names)
// longer than 255 bytes.
const (
	MaxKeyLen     = 1024
	MaxSegmentLen = 255
)

// ValidKey reports whether key is acceptable to every Store: non-empty,
// valid UTF-8, at most MaxKeyLen bytes, slash-separated, relative (no
// leading "/"), without empty, "." or ".." segments or segments longer than
// MaxSegmentLen bytes, without backslashes or NUL bytes, and not ending in
// ".tmp" (reserved for the directory store's in-progress writes). The error
// matches ErrInvalidKey. A Store wrapped by Prefixed checks the full key, so
// a prefix counts towards the limits.
func ValidKey(key string) error {
	switch {
	case key == "":
		return fmt.Errorf("objstore: empty key: %w", ErrInvalidKey)
	case len(key) > MaxKeyLen:
		return fmt.Errorf("objstore: key %q… is %d bytes, longer than %d: %w", key[:64], len(key), MaxKeyLen, ErrInvalidKey)
	case !utf8.ValidString(key):
		return fmt.Errorf("objstore: key %q is not valid UTF-8: %w", key, ErrInvalidKey)
	case strings.HasPrefix(key, "/"):
		return fmt.Errorf("objstore: key %q is absolute: %w", key, ErrInvalidKey)
	case strings.ContainsAny(key, "\\\x00"):
		return fmt.Errorf("objstore: key %q contains a backslash or NUL: %w", key, ErrInvalidKey)
	case strings.HasSuffix(key, ".tmp"):
		return fmt.Errorf("objstore: key %q ends in the reserved suffix .tmp: %w", key, ErrInvalidKey)
	}
	for _, seg := range strings.Split(key, "/") {
		switch {
		case seg == "" || seg == "." || seg == "..":
			return fmt.Errorf("objstore: key %q has an empty, \".\" or \"..\" segment: %w", key, ErrInvalidKey)
		case len(seg) > MaxSegmentLen:
			return fmt.Errorf("objstore: key %q has a segment longer than %d bytes: %w", key, MaxSegmentLen, ErrInvalidKey)
		}
	}
	return nil
}

// validPrefix accepts "" or a prefix whose complete segments are valid; the
// last segment may be partial or empty (a prefix ending in "/"). The error
// matches ErrInvalidKey.
func validPrefix(prefix string) error {
	if prefix == "" {
		return nil
	}
	if strings.HasPrefix(prefix, "/") || strings.ContainsAny(prefix, "\\\x00") || !utf8.ValidString(prefix) {
		return fmt.Errorf("objstore: invalid prefix %q: %w", prefix, ErrInvalidKey)
	}
	segs := strings.Split(prefix, "/")
	for i, seg := range segs {
		if seg == ".." || (i < len(segs)-1 && (seg == "" || seg == ".")) {
			return fmt.Errorf("objstore: invalid prefix %q: %w", prefix, ErrInvalidKey)
		}
	}
	return nil
}
