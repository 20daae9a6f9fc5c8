package run_test

import (
	"os"
	"strings"
	"testing"
)

// TestArchitectureDocListsTheExample: docs/architecture.md lists
// Example_pipeline verbatim (the code between the example markers of
// example_pipeline_test.go), so the document's example is code that
// compiles and runs in go test.
func TestArchitectureDocListsTheExample(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile("example_pipeline_test.go")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(src), "// example:begin\n")
	listing, _, ok2 := strings.Cut(after, "// example:end")
	if !ok || !ok2 {
		t.Fatal("example_pipeline_test.go lacks its example:begin/example:end markers")
	}
	listing = strings.Trim(listing, "\n")
	doc, err := os.ReadFile("../../docs/architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc), "```go\n"+listing+"\n```") {
		t.Error("docs/architecture.md does not list Example_pipeline as it is in example_pipeline_test.go; copy the code between the markers into the document's go block")
	}
}
