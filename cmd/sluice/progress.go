package main

import (
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"time"
)

// plainProgressEvery is how often a progress bar that is not on a terminal
// prints a line (besides its first and its last state).
const plainProgressEvery = 5 * time.Second

// progressBar draws a one-line progress bar for interactive commands (demo,
// smap progress). On a terminal it redraws in place ("\r", erase to end of
// line); otherwise (a pipe, a file, a log collector) it prints plain lines
// without control codes: the first state, then at most one line per
// plainProgressEvery, skipping a state equal to the last printed, and the
// last state at finish. Not safe for concurrent use.
type progressBar struct {
	w     io.Writer
	label string
	width int
	tty   bool             // redraw in place
	now   func() time.Time // the clock (tests inject one)
	start time.Time
	drawn bool // update was called: the line needs ending

	// plain mode
	printedAt       time.Time
	printed, unsent string // the last line printed; the last line drawn but not printed
}

func newProgressBar(w io.Writer, label string) *progressBar {
	return newProgressBarOn(w, label, isTerminal(w), time.Now)
}

func newProgressBarOn(w io.Writer, label string, tty bool, now func() time.Time) *progressBar {
	return &progressBar{w: w, label: label, width: 30, tty: tty, now: now, start: now()}
}

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
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
	now := p.now()
	line := fmt.Sprintf("%-8s [%s%s] %5.1f%% %d/%d", p.label, strings.Repeat("█", filled), strings.Repeat("·", p.width-filled),
		math.Floor(pct*10)/10, done, total)
	if p.tty {
		p.drawn = true
		fmt.Fprintf(p.w, "\r%s %s %s\x1b[K", line, now.Sub(p.start).Truncate(100*time.Millisecond), note)
		return
	}
	// Plain lines: the elapsed time is left out of the comparison so that
	// an unchanged state is not printed again.
	line = strings.TrimRight(line+" "+note, " ")
	if line == p.printed {
		p.unsent = ""
		return
	}
	if p.printed != "" && now.Sub(p.printedAt) < plainProgressEvery {
		p.unsent = line
		return
	}
	p.printLine(line, now)
}

func (p *progressBar) printLine(line string, now time.Time) {
	fmt.Fprintf(p.w, "%s (%s)\n", line, now.Sub(p.start).Truncate(100*time.Millisecond))
	p.printed, p.printedAt, p.unsent = line, now, ""
}

// finish ends the bar's line (on a terminal) or prints the last state not
// yet printed. A bar never drawn prints nothing, so that a command that
// fails before its first update leaves stdout empty.
func (p *progressBar) finish() {
	if p.drawn {
		fmt.Fprintln(p.w)
		p.drawn = false
	}
	if p.unsent != "" {
		p.printLine(p.unsent, p.now())
	}
}
