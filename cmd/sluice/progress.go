package main

import (
	"fmt"
	"io"
	"math"
	"strings"
	"time"
)

// progressBar draws a one-line progress bar that redraws in place on a
// terminal ("\r"); it is meant for interactive commands (demo, smap progress).
type progressBar struct {
	w     io.Writer
	label string
	width int
	start time.Time
	drawn bool // update was called: the line needs ending
}

func newProgressBar(w io.Writer, label string) *progressBar {
	return &progressBar{w: w, label: label, width: 30, start: time.Now()}
}

// update redraws the bar for done of total, with an optional note.
func (p *progressBar) update(done, total int64, note string) {
	pct := 0.0
	if total > 0 {
		pct = 100 * float64(done) / float64(total)
	}
	p.draw(pct, done, total, note)
}

// draw redraws the bar at pct percent (clamped to 0–100) for done of total.
// The percentage shown is rounded down to one decimal, so the bar reads
// 100.0% only when pct is 100 (19999 of 20000 reads 99.9%).
func (p *progressBar) draw(pct float64, done, total int64, note string) {
	pct = min(max(pct, 0), 100)
	filled := int(pct / 100 * float64(p.width))
	p.drawn = true
	fmt.Fprintf(p.w, "\r%-8s [%s%s] %5.1f%% %d/%d %s %s\x1b[K", p.label, strings.Repeat("█", filled), strings.Repeat("·", p.width-filled),
		math.Floor(pct*10)/10, done, total, time.Since(p.start).Truncate(100*time.Millisecond), note)
}

// finish ends the bar's line. A bar never drawn prints nothing, so that a
// command that fails before its first update leaves stdout empty.
func (p *progressBar) finish() {
	if p.drawn {
		fmt.Fprintln(p.w)
	}
}
