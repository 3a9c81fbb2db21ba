package manifests

import (
	"flag"
	"regexp"
	"testing"

	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/sourceflags"
)

// annotationKey matches the acknowledgement annotation as the docs write
// it, applied.backpressure.dev/<placeholder>.
var annotationKey = regexp.MustCompile(`applied\.backpressure\.dev/<([a-z-]+)>`)

// Every document, and the --acknowledge help of the sidecar and the
// example gateway, names the acknowledgement annotation one way:
// applied.backpressure.dev/<quota>, the key the operator reads; the
// library's gate is named after its quota.
func TestDocsNameTheAcknowledgementOneWay(t *testing.T) {
	texts := map[string]string{}
	for _, doc := range docFiles(t) {
		texts[doc] = string(readRepoFile(t, doc))
	}
	fs := flag.NewFlagSet("proxy", flag.ContinueOnError)
	var f sourceflags.Flags
	f.Register(fs, func(string) string { return "" })
	texts["--acknowledge's help"] = fs.Lookup("acknowledge").Usage
	found := 0
	for where, text := range texts {
		for _, m := range annotationKey.FindAllStringSubmatch(text, -1) {
			found++
			if m[1] != "quota" {
				t.Errorf("%s names the annotation %s, want applied.backpressure.dev/<quota>", where, m[0])
			}
		}
	}
	if found < 5 {
		t.Errorf("found the annotation %d times in the docs, want at least 5: the test would check next to nothing", found)
	}
}
