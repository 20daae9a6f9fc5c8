// Command testsummary reads `go test -json` on stdin, writes the plain
// verbose log (what `go test -v` prints) to -log and prints a summary: the
// package result lines, every skipped test with its reason, every failed
// test with its output, and a last line "N passed, N failed, N skipped".
//
// The events of `go test -json` name the test each output line belongs to,
// so a skip reason is found even when parallel tests interleave their
// output (in the plain -v log the line before "--- SKIP" may be another
// test's). Lines that are not JSON (a build error on stderr) are copied to
// the log and listed as failures. Used by deploy/scripts/gotest.sh.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Action  string
	Package string
	Test    string
	Output  string
}

// summary accumulates the results of a test run. Not safe for concurrent use.
type summary struct {
	pkgLines []string
	output   map[[2]string][]string // (package, test) → its output lines
	skipped  []result
	failed   []result
	passed   int
	other    []string // lines that were not JSON
}

type result struct {
	pkg, test string
	lines     []string
}

func newSummary() *summary { return &summary{output: map[[2]string][]string{}} }

// add takes one input line; log receives the plain text of the run.
func (s *summary) add(line string, log io.Writer) {
	var e event
	if err := json.Unmarshal([]byte(line), &e); err != nil || e.Action == "" {
		fmt.Fprintln(log, line)
		if strings.TrimSpace(line) != "" {
			s.other = append(s.other, line)
		}
		return
	}
	if e.Output != "" {
		fmt.Fprint(log, e.Output)
	}
	key := [2]string{e.Package, e.Test}
	switch e.Action {
	case "output", "build-output":
		if e.Test != "" {
			s.output[key] = append(s.output[key], strings.TrimRight(e.Output, "\n"))
		} else if isPackageResult(e.Output) {
			s.pkgLines = append(s.pkgLines, strings.TrimRight(e.Output, "\n"))
		} else if e.Action == "build-output" {
			s.other = append(s.other, strings.TrimRight(e.Output, "\n"))
		}
	case "skip":
		if e.Test != "" {
			s.skipped = append(s.skipped, result{e.Package, e.Test, ownLines(s.output[key])})
		}
	case "fail":
		if e.Test != "" {
			s.failed = append(s.failed, result{e.Package, e.Test, ownLines(s.output[key])})
		}
	case "pass":
		if e.Test != "" {
			s.passed++
			delete(s.output, key)
		}
	}
}

// isPackageResult reports whether a package-level output line is go test's
// result line for the package ("ok  \tpkg\t1.2s", "FAIL\tpkg …").
func isPackageResult(out string) bool {
	return strings.HasPrefix(out, "ok  \t") || strings.HasPrefix(out, "FAIL\t")
}

// ownLines drops go test's framing lines (=== RUN/PAUSE/CONT/NAME,
// --- PASS/FAIL/SKIP), keeping what the test itself logged.
func ownLines(lines []string) []string {
	var out []string
	for _, l := range lines {
		t := strings.TrimSpace(l)
		if t == "" || strings.HasPrefix(t, "=== ") || strings.HasPrefix(t, "--- ") {
			continue
		}
		out = append(out, t)
	}
	return out
}

// write prints the summary to w.
func (s *summary) write(w io.Writer) {
	for _, l := range s.pkgLines {
		fmt.Fprintln(w, l)
	}
	if len(s.skipped) > 0 {
		fmt.Fprintln(w, "\nSkipped tests (with reasons):")
		for _, r := range s.skipped {
			reason := "(no reason given)"
			if len(r.lines) > 0 {
				reason = strings.Join(r.lines, " | ")
			}
			fmt.Fprintf(w, "  %s %s: %s\n", r.pkg, r.test, reason)
		}
	}
	if len(s.failed) > 0 || len(s.other) > 0 {
		fmt.Fprintln(w, "\nFailures:")
		for _, r := range s.failed {
			fmt.Fprintf(w, "  --- FAIL %s %s\n", r.pkg, r.test)
			for i, l := range r.lines {
				if i == 200 {
					fmt.Fprintf(w, "      … %d more lines in the log\n", len(r.lines)-i)
					break
				}
				fmt.Fprintf(w, "      %s\n", l)
			}
		}
		for _, l := range s.other {
			fmt.Fprintf(w, "  %s\n", l)
		}
	}
}

func (s *summary) counts() string {
	return fmt.Sprintf("%d passed, %d failed, %d skipped", s.passed, len(s.failed), len(s.skipped))
}

func main() {
	logPath := flag.String("log", "", "write the plain verbose log here (required)")
	countsPath := flag.String("counts", "", "write the closing counts line here instead of printing it")
	flag.Parse()
	if *logPath == "" {
		fmt.Fprintln(os.Stderr, "testsummary: -log is required")
		os.Exit(2)
	}
	log, err := os.Create(*logPath)
	if err != nil {
		fmt.Fprintf(os.Stderr, "testsummary: %v\n", err)
		os.Exit(2)
	}
	s := newSummary()
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		s.add(sc.Text(), log)
	}
	if err := sc.Err(); err != nil {
		fmt.Fprintf(os.Stderr, "testsummary: read: %v\n", err)
	}
	if err := log.Close(); err != nil {
		fmt.Fprintf(os.Stderr, "testsummary: %v\n", err)
	}
	s.write(os.Stdout)
	if *countsPath != "" {
		if err := os.WriteFile(*countsPath, []byte(s.counts()+"\n"), 0o644); err != nil {
			fmt.Fprintf(os.Stderr, "testsummary: %v\n", err)
		}
		return
	}
	fmt.Println(s.counts())
}
