package main

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/backpressure-dev/backpressure-operator/api/plan"
	"github.com/backpressure-dev/backpressure-operator/api/plan/plantest"
)

// process is the gateway binary running as a child process.
type process struct {
	cmd    *exec.Cmd
	log    *logBuffer
	exited chan struct{}
	err    error // Wait's error, once exited is closed
}

// startBinary runs the gateway binary with args and env added to the
// test's environment.
func startBinary(t *testing.T, env []string, args ...string) *process {
	t.Helper()
	cmd := exec.Command(gatewayBinary(t), args...)
	cmd.Env = append(os.Environ(), env...)
	p := &process{cmd: cmd, log: &logBuffer{}, exited: make(chan struct{})}
	cmd.Stderr = p.log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			_ = cmd.Process.Kill()
			<-p.exited
		}
	})
	return p
}

// wait waits up to ten seconds for the process to exit and returns its exit
// code.
func (p *process) wait(t testing.TB) int {
	t.Helper()
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		t.Fatalf("gateway still running after 10s:\n%s", p.log)
	}
	var exit *exec.ExitError
	if errors.As(p.err, &exit) {
		return exit.ExitCode()
	}
	if p.err != nil {
		t.Fatal(p.err)
	}
	return 0
}

// address waits for the Serving line and returns its address.
func (p *process) address(t testing.TB) string {
	t.Helper()
	var addr string
	eventually(t, 10*time.Second, "the gateway logs Serving", func() bool {
		for _, e := range withMsg(p.log.entries(t), "Serving") {
			addr, _ = e["address"].(string)
		}
		return addr != ""
	})
	return addr
}

func TestSIGTERMDrainsInFlightRequests(t *testing.T) {
	ds := newDownstream(t)
	dir := t.TempDir()
	plantest.Write(t, dir, testPlan(4, 0))
	p := startBinary(t, nil, "--listen", "127.0.0.1:0", "--downstream", ds.URL, "--gate", testGate, "--plan-dir", dir)
	addr := p.address(t)

	ds.holdCalls()
	type result struct {
		status int
		body   string
		err    error
	}
	res := make(chan result, 1)
	go func() {
		resp, err := http.Get("http://" + addr + "/")
		if err != nil {
			res <- result{err: err}
			return
		}
		defer func() { _ = resp.Body.Close() }()
		body, err := io.ReadAll(resp.Body)
		res <- result{resp.StatusCode, string(body), err}
	}()
	eventually(t, 5*time.Second, "the call reaches the downstream", func() bool { return ds.inFlight.Load() == 1 })

	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// New connections are refused while the in-flight request finishes.
	eventually(t, 5*time.Second, "the listener is closed", func() bool {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			_ = c.Close()
		}
		return err != nil
	})
	select {
	case <-p.exited:
		t.Fatalf("the gateway exited before its in-flight request finished:\n%s", p.log)
	case <-time.After(100 * time.Millisecond):
	}

	ds.unhold()
	r := <-res
	if r.err != nil || r.status != http.StatusOK || r.body != "quote 42\n" {
		t.Errorf("in-flight request: %d %q %v; want 200 with the downstream's body", r.status, r.body, r.err)
	}
	if code := p.wait(t); code != 0 {
		t.Errorf("exit code %d, want 0:\n%s", code, p.log)
	}
	entries := p.log.entries(t)
	if last := entries[len(entries)-1]; last["msg"] != "Stopped" || last["level"] != "INFO" {
		t.Errorf("last log line %v, want Stopped", last)
	}
}

// A connection a client opened and never used (an HTTP client's pool leaves
// such connections behind) does not hold the gateway, and so its share,
// after SIGTERM: http.Server.Shutdown alone would wait 5 seconds for it.
func TestSIGTERMDoesNotWaitForUnusedConnections(t *testing.T) {
	ds := newDownstream(t)
	dir := t.TempDir()
	plantest.Write(t, dir, testPlan(4, 0))
	p := startBinary(t, nil, "--listen", "127.0.0.1:0", "--downstream", ds.URL, "--gate", testGate, "--plan-dir", dir)
	addr := p.address(t)
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	time.Sleep(100 * time.Millisecond) // the server has accepted it

	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.exited:
	case <-time.After(3 * time.Second):
		t.Fatalf("the gateway still runs 3 s after SIGTERM with one unused connection open:\n%s", p.log)
	}
	if code := p.wait(t); code != 0 {
		t.Errorf("exit code %d, want 0:\n%s", code, p.log)
	}
}

func TestStartWithoutAValidPlan(t *testing.T) {
	other := testPlan(2, 0)
	other.Gate, other.Hash = "payments", ""
	otherData, err := plan.Marshal(other)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		files     map[string]string
		oneLine   bool // nothing else to say
		wantInErr string
	}{
		{"empty directory", nil, true, "no valid plan document"},
		{"only another gate's plan", map[string]string{"payments.json": string(otherData)}, false, `no valid plan document for gate "logistics-api"`},
		{"an invalid plan", map[string]string{"logistics-api.json": `{"version":2,"gate":"logistics-api"}`}, false, "permits: required"},
		{"no directory", nil, true, "no such file or directory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, data := range tt.files {
				if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if tt.name == "no directory" {
				dir = filepath.Join(dir, "absent")
			}
			start := time.Now()
			p := startBinary(t, nil, "--listen", "127.0.0.1:0", "--downstream", "http://127.0.0.1:1", "--gate", testGate, "--plan-dir", dir)
			if code := p.wait(t); code != 1 {
				t.Fatalf("exit code %d, want 1:\n%s", code, p.log)
			}
			if took := time.Since(start); took > 5*time.Second {
				t.Errorf("failing took %v", took)
			}
			entries := p.log.entries(t)
			if tt.oneLine && len(entries) != 1 {
				t.Errorf("%d log lines, want 1:\n%s", len(entries), p.log)
			}
			last := entries[len(entries)-1]
			if last["level"] != "ERROR" || !strings.Contains(last["err"].(string), tt.wantInErr) {
				t.Errorf("last line %v, want an error containing %q", last, tt.wantInErr)
			}
			if len(withMsg(entries, "Serving")) > 0 || len(withMsg(entries, "Applied plan")) > 0 {
				t.Errorf("a gateway without a plan served or applied one:\n%s", p.log)
			}
		})
	}
}

func TestBadCommandLine(t *testing.T) {
	p := startBinary(t, nil, "--gate", testGate, "--plan-dir", t.TempDir(), "--configmap", "x")
	if code := p.wait(t); code != 1 {
		t.Fatalf("exit code %d, want 1", code)
	}
	sc := bufio.NewScanner(strings.NewReader(p.log.String()))
	lines := 0
	for sc.Scan() {
		lines++
	}
	entries := p.log.entries(t)
	if lines != 1 || !strings.Contains(entries[0]["err"].(string), "--downstream is required; exactly one of --configmap and --plan-dir is required") {
		t.Errorf("stderr:\n%s\nwant one line naming both mistakes", p.log)
	}
}
