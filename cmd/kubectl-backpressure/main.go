// Command kubectl-backpressure is a calculator for backpressure-operator's
// sizing math: the per-pod share of a DownstreamQuota (or of flags) over a
// replica count or an HPA's whole range, an existing pool against a
// deadline, retry amplification under overload, and backlog growth. On PATH
// it is the kubectl plugin `kubectl backpressure`.
//
// It plans through internal/quota, the code path the controller uses,
// so its numbers are the ones the operator publishes.
package main

import (
	"fmt"
	"io"
	"os"
	"strings"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// run executes the command line args, reading stdin for -f -, and returns
// the exit code: 0 on success, 1 with one line on stderr on any error.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	cmd := newRootCommand(stdout, stderr)
	cmd.SetIn(stdin)
	cmd.SetArgs(args)
	if err := cmd.Execute(); err != nil {
		fmt.Fprintln(stderr, "error: "+oneLine(err.Error()))
		return 1
	}
	return 0
}

// oneLine folds a multi-line message (a YAML parser's, a suggestion list)
// onto one line.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
