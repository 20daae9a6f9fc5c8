package main

import (
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// exampleWords splits one example line as a shell would for these simple
// lines: leading VAR=value assignments and a trailing "  # comment" are
// dropped, and a double-quoted word stays one word.
func exampleWords(line string) []string {
	if i := strings.Index(line, " #"); i >= 0 {
		line = line[:i]
	}
	var words []string
	var cur strings.Builder
	inWord, quoted := false, false
	for _, r := range line {
		switch {
		case r == '"':
			quoted, inWord = !quoted, true
		case r == ' ' && !quoted:
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	assign := regexp.MustCompile(`^[A-Z_][A-Z0-9_]*=`)
	for len(words) > 0 && assign.MatchString(words[0]) {
		words = words[1:]
	}
	return words
}

// Every command's help has an Examples section of one to three
// invocations; each invocation starts with the command's own path (so an
// example cannot drift to another command), resolves to that command (or,
// for a group, one of its subcommands) in the tree, and uses only flags
// the command it resolves to has.
func TestEveryCommandHasExamples(t *testing.T) {
	t.Parallel()
	root := newRootCmd()
	n := 0
	walkCommands(root, func(c *cobra.Command) {
		n++
		path := c.CommandPath()
		help, err := runCLI(t, append(strings.Fields(path)[1:], "--help")...)
		if err != nil {
			t.Fatalf("%s --help: %v", path, err)
		}
		i := strings.Index(help, "\nExamples:\n")
		if i < 0 {
			t.Errorf("%s --help: no Examples section\n%s", path, help)
			return
		}
		section, _, _ := strings.Cut(help[i+len("\nExamples:\n"):], "\n\n")
		var invocations int
		for _, line := range strings.Split(section, "\n") {
			line = strings.TrimSpace(line)
			if line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			invocations++
			words := exampleWords(line)
			if got := strings.Join(words, " "); got != path && !strings.HasPrefix(got, path+" ") {
				t.Errorf("%s: example %q does not start with %q", path, line, path)
				continue
			}
			found, rest, err := root.Find(words[1:])
			// A group's examples name its subcommands.
			if err != nil || (found != c && !strings.HasPrefix(found.CommandPath(), path+" ")) {
				t.Errorf("%s: example %q resolves to %v (%v)", path, line, found.CommandPath(), err)
				continue
			}
			if err := found.ParseFlags(rest); err != nil {
				t.Errorf("%s: example %q: %v", path, line, err)
			}
		}
		if invocations < 1 || invocations > 3 {
			t.Errorf("%s: %d example invocations, want 1 to 3:\n%s", path, invocations, section)
		}
	})
	if n < 30 {
		t.Fatalf("walked %d commands: the tree walk misses commands", n)
	}
}
