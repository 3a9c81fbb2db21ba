package main

import (
	"bytes"
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestBinary builds the plugin and runs it as a user would: a bad flag exits
// non-zero with one line on stderr and no usage or stack trace.
func TestBinary(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH to build the binary with")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	bin := filepath.Join(t.TempDir(), "kubectl-backpressure")
	if out, err := exec.CommandContext(ctx, goBin, "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}

	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"plan", "-f", "testdata/quota.yaml", "--replicas", "many"}, `error: invalid argument "many" for "--replicas" flag: strconv.ParseInt: parsing "many": invalid syntax`},
		{[]string{"plan", "-f", "testdata/duplicate-key.yaml", "--replicas", "8"}, `error: testdata/duplicate-key.yaml: yaml: unmarshal errors: line 7: key "contract" already set in map`},
	} {
		var stdout, stderr bytes.Buffer
		cmd := exec.CommandContext(ctx, bin, tt.args...)
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 1 {
			t.Errorf("%v: err = %v, want exit status 1", tt.args, err)
		}
		if stderr.String() != tt.want+"\n" || strings.Count(stderr.String(), "\n") != 1 || stdout.Len() != 0 {
			t.Errorf("%v: stdout %q, stderr %q; want only %q on stderr", tt.args, stdout.String(), stderr.String(), tt.want)
		}
	}

	out, err := exec.CommandContext(ctx, bin, "plan", "-f", "testdata/quota.yaml", "--replicas", "8").Output()
	if err != nil || !strings.Contains(string(out), "permits          5") {
		t.Errorf("plan: err %v, output:\n%s", err, out)
	}
}
