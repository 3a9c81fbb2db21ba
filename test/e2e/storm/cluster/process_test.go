//go:build unix

package cluster

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// script writes a shell script into a temporary directory and returns its
// path: a small process whose behaviour on SIGTERM the test chooses.
func script(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "proc.sh")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// serveThenWait traps SIGTERM and writes its stdout line before it says it
// serves: the test signals it as soon as it reads "Serving".
const serveThenWait = `trap 'echo "{\"time\":\"2026-05-01T10:00:01Z\",\"level\":\"INFO\",\"msg\":\"Stopped\"}" >&2; exit 0' TERM
echo "plain stdout"
echo '{"time":"2026-05-01T10:00:00Z","level":"INFO","msg":"Serving","address":"127.0.0.1:1"}' >&2
while :; do sleep 0.05; done
`

func TestProcessTerminateGracefully(t *testing.T) {
	var mu sync.Mutex
	var msgs []string
	logPath := filepath.Join(t.TempDir(), "p.log")
	var ps Processes
	defer ps.StopAll()
	p, err := ps.Start(ProcessSpec{
		Name: "p", Path: script(t, serveThenWait), LogPath: logPath,
		OnLog: func(l LogLine) { mu.Lock(); msgs = append(msgs, l.Msg); mu.Unlock() },
	})
	if err != nil {
		t.Fatal(err)
	}
	waitUntil(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(msgs) == 1 })
	if err := p.Terminate(5 * time.Second); err != nil {
		t.Fatalf("Terminate: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(msgs, ",") != MsgServing+","+MsgStopped {
		t.Errorf("log messages %q, want Serving then Stopped", msgs)
	}
	b, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "plain stdout") || !strings.Contains(string(b), `"msg":"Stopped"`) {
		t.Errorf("log file lacks stdout or stderr:\n%s", b)
	}
}

func TestProcessTerminateKillsAfterGrace(t *testing.T) {
	var ps Processes
	defer ps.StopAll()
	p, err := ps.Start(ProcessSpec{Name: "stubborn", Path: script(t, "trap '' TERM\necho started\nwhile :; do sleep 0.05; done\n")})
	if err != nil {
		t.Fatal(err)
	}
	waitUntil(t, func() bool { return strings.Contains(p.Tail(), "started") })
	t0 := time.Now()
	err = p.Terminate(300 * time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "killed") {
		t.Errorf("Terminate() = %v, want a killed error", err)
	}
	if d := time.Since(t0); d < 300*time.Millisecond || d > 3*time.Second {
		t.Errorf("Terminate took %v, want the grace period", d)
	}
}

// TestStopAllKillsTheProcessGroup checks that what a process started goes
// with it: a pod's process must not leave children behind.
func TestStopAllKillsTheProcessGroup(t *testing.T) {
	var ps Processes
	p, err := ps.Start(ProcessSpec{Name: "parent", Path: script(t, "sleep 60 &\necho child $!\nwait\n")})
	if err != nil {
		t.Fatal(err)
	}
	var child int
	waitUntil(t, func() bool {
		_, rest, ok := strings.Cut(p.Tail(), "child ")
		if ok {
			child, _ = strconv.Atoi(strings.TrimSpace(rest))
		}
		return child > 0
	})
	ps.StopAll()
	select {
	case <-p.Done():
	default:
		t.Fatal("StopAll returned before the process ended")
	}
	waitUntil(t, func() bool { return syscall.Kill(child, 0) != nil })
	if _, err := ps.Start(ProcessSpec{Name: "late", Path: "/bin/true"}); err == nil {
		t.Error("Start after StopAll succeeded")
	}
}

func TestProcessExitedReportsTheTail(t *testing.T) {
	var ps Processes
	defer ps.StopAll()
	p, err := ps.Start(ProcessSpec{Name: "failing", Path: script(t, "echo 'gateway: no valid plan for gate logistics-api' >&2\nexit 1\n")})
	if err != nil {
		t.Fatal(err)
	}
	<-p.Done()
	msg := p.Exited().Error()
	if !strings.Contains(msg, "failing exited") || !strings.Contains(msg, "exit status 1") || !strings.Contains(msg, "no valid plan") {
		t.Errorf("Exited() = %q", msg)
	}
}

func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
