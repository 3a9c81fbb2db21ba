package backpressure_test

import (
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// between returns the text of s between the lines begin and end, which must
// each occur once.
func between(t *testing.T, name, s, begin, end string) string {
	t.Helper()
	_, rest, ok := strings.Cut(s, begin)
	if !ok || strings.Count(s, begin) != 1 {
		t.Fatalf("%s: want exactly one %q", name, begin)
	}
	text, _, ok := strings.Cut(rest, end)
	if !ok {
		t.Fatalf("%s: no %q after %q", name, end, begin)
	}
	return strings.Trim(text, "\n")
}

// The README's library snippet is the code of the package's Example, which
// go test compiles and runs: it cannot drift into code that does not build
// or that shows another way.
func TestREADMESnippetIsTheExample(t *testing.T) {
	example, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	want := between(t, "example_test.go", string(example), "// README:begin\n", "// README:end\n")
	got := between(t, "README.md", string(readme), "<!-- README:begin pkg/backpressure/example_test.go -->\n```go\n", "```\n<!-- README:end -->")
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("README.md's snippet differs from the code between the README markers of example_test.go (-want +got):\n%s", diff)
	}
}
