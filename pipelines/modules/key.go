package modules

import "strings"

// Key returns the record key of ticker × module on modules.refresh,
// modules.state and modules.dlq: the upper-cased ticker, ':', the module
// id, e.g. "NVDA:options_flow". Upper-casing is ASCII only, as the
// tickers' CITEXT compares them.
func Key(ticker, module string) string {
	return NormalizeTicker(ticker) + ":" + module
}

// SplitKey splits a key at its first ':' into its ticker and module parts,
// unchanged; ok is false when there is no ':'.
func SplitKey(key string) (ticker, module string, ok bool) {
	return strings.Cut(key, ":")
}

// NormalizeTicker upper-cases the ASCII letters of ticker and leaves every
// other byte alone (strings.ToUpper would turn 'ſ' into 'S', making a
// ticker valid that the rules must refuse).
func NormalizeTicker(ticker string) string {
	return asciiUpper(ticker)
}

func asciiUpper(s string) string {
	for i := 0; i < len(s); i++ {
		if 'a' <= s[i] && s[i] <= 'z' {
			b := []byte(s)
			for j := i; j < len(b); j++ {
				if 'a' <= b[j] && b[j] <= 'z' {
					b[j] -= 'a' - 'A'
				}
			}
			return string(b)
		}
	}
	return s
}

// equalFoldASCII reports whether a and b are equal when ASCII letters are
// compared without case (strings.EqualFold also folds other letters, such
// as the Kelvin sign with 'k').
func equalFoldASCII(a, b string) bool {
	return len(a) == len(b) && asciiUpper(a) == asciiUpper(b)
}
