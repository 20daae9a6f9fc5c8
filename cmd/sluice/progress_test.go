package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestProgressBarPercent(t *testing.T) {
	for _, tc := range []struct {
		name        string
		pct         float64
		done, total int64
		want        string
		full        bool
	}{
		{"almost done stays below 100", 99.995, 19999, 20000, " 99.9% 19999/20000", false},
		{"done", 100, 20000, 20000, "100.0% 20000/20000", true},
		{"empty project done", 100, 0, 0, "100.0% 0/0", true},
		{"half", 50, 1, 2, " 50.0% 1/2", false},
		{"over 100 is clamped", 130, 13, 10, "100.0% 13/10", true},
		{"negative is clamped", -5, 0, 10, "  0.0% 0/10", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			newProgressBar(&buf, "p").draw(tc.pct, tc.done, tc.total, "")
			out := buf.String()
			if !strings.Contains(out, tc.want) {
				t.Errorf("bar %q does not show %q", out, tc.want)
			}
			if full := !strings.Contains(out, "·"); full != tc.full {
				t.Errorf("bar %q: full = %v, want %v", out, full, tc.full)
			}
		})
	}
	var buf bytes.Buffer
	newProgressBar(&buf, "p").update(19999, 20000, "")
	if !strings.Contains(buf.String(), " 99.9% 19999/20000") {
		t.Errorf("update(19999, 20000) = %q, want 99.9%%", buf.String())
	}
}
