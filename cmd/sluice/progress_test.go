package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
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

// Written to something that is not a terminal (a pipe, a log file) the bar
// used to redraw with "\r" and an erase code, which piles up in logs; it
// now prints plain lines: the first state, at most one per
// plainProgressEvery, never the same state twice, and the last at finish.
func TestProgressBarPlainLinesOffTerminal(t *testing.T) {
	clock := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := func() time.Time { return clock }
	var buf bytes.Buffer
	bar := newProgressBarOn(&buf, "produce", false, now)
	for i := int64(0); i <= 99; i++ {
		bar.update(i, 100, "")
		clock = clock.Add(time.Second) // 100 s of updates, one per second
	}
	bar.update(99, 100, "") // unchanged: not printed again
	bar.finish()
	out := buf.String()
	if strings.ContainsAny(out, "\r\x1b") {
		t.Fatalf("control codes off a terminal: %q", out)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	// 0 s, 5 s, …, 95 s: 20 lines, then 99 at finish.
	if len(lines) != 21 {
		t.Fatalf("%d lines, want 21 (one per 5 s and the last state):\n%s", len(lines), out)
	}
	if !strings.Contains(lines[0], "  0.0% 0/100 (0s)") || !strings.Contains(lines[1], "  5.0% 5/100 (5s)") ||
		!strings.Contains(lines[20], " 99.0% 99/100 (1m40s)") {
		t.Fatalf("lines do not show the sampled states:\n%s", out)
	}

	buf.Reset()
	tty := newProgressBarOn(&buf, "produce", true, now)
	tty.update(1, 2, "x")
	tty.update(2, 2, "x")
	tty.finish()
	if got := buf.String(); strings.Count(got, "\r") != 2 || strings.Count(got, "\x1b[K") != 2 || strings.Count(got, "\n") != 1 {
		t.Fatalf("on a terminal the bar redraws in place and ends with one newline: %q", got)
	}
}
