//go:build unix

package cluster

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ProcessSpec describes an OS process the harness runs.
type ProcessSpec struct {
	// Name identifies the process in errors and in the log file's name.
	Name string
	// Path and Args are the command.
	Path string
	Args []string
	// Env is added to the harness's own environment.
	Env []string
	// Dir is the working directory; empty means the harness's.
	Dir string
	// LogPath, when set, receives the process's stdout and stderr as they are.
	LogPath string
	// OnLog is called, from one goroutine, for every JSON log line on stderr.
	OnLog func(LogLine)
}

// Process is a running OS process in its own process group, so that
// stopping it stops whatever it started, and a Ctrl-C in the harness's
// terminal reaches the harness, which stops it in order.
type Process struct {
	spec ProcessSpec
	cmd  *exec.Cmd
	log  *os.File

	done    chan struct{}
	waitErr error // set before done is closed

	mu   sync.Mutex
	tail []string // the last lines of output, for errors
}

const tailLines = 20

// Processes starts processes and stops every one of them on StopAll, on any
// exit path of the harness.
type Processes struct {
	mu     sync.Mutex
	all    []*Process
	closed bool
}

// Start starts a process and registers it for StopAll.
func (ps *Processes) Start(spec ProcessSpec) (*Process, error) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.closed {
		return nil, errors.New("storm: processes already stopped")
	}
	p, err := startProcess(spec)
	if err != nil {
		return nil, err
	}
	ps.all = append(ps.all, p)
	return p, nil
}

// StopAll kills every process still running and waits for each to end. No
// process can be started after it.
func (ps *Processes) StopAll() {
	ps.mu.Lock()
	ps.closed = true
	all := ps.all
	ps.mu.Unlock()
	for _, p := range all {
		p.Kill()
	}
	for _, p := range all {
		<-p.done
	}
}

func startProcess(spec ProcessSpec) (*Process, error) {
	p := &Process{spec: spec, done: make(chan struct{})}
	cmd := exec.Command(spec.Path, spec.Args...)
	cmd.Dir = spec.Dir
	cmd.Env = append(os.Environ(), spec.Env...)
	cmd.SysProcAttr = sysProcAttr()
	var sinks []io.Writer
	if spec.LogPath != "" {
		f, err := os.Create(spec.LogPath)
		if err != nil {
			return nil, fmt.Errorf("storm: %s: %w", spec.Name, err)
		}
		p.log = f
		sinks = append(sinks, f)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		p.closeLog()
		return nil, err
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		p.closeLog()
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		p.closeLog()
		return nil, fmt.Errorf("storm: start %s: %w", spec.Name, err)
	}
	p.cmd = cmd

	var readers sync.WaitGroup
	var logMu sync.Mutex // the two readers share the log file
	readers.Add(2)
	go func() { defer readers.Done(); p.read(stdout, sinks, &logMu, nil) }()
	go func() { defer readers.Done(); p.read(stderr, sinks, &logMu, spec.OnLog) }()
	go func() {
		// Wait must come after the pipes are drained.
		readers.Wait()
		p.waitErr = cmd.Wait()
		p.closeLog()
		close(p.done)
	}()
	return p, nil
}

func (p *Process) read(r io.Reader, sinks []io.Writer, logMu *sync.Mutex, onLog func(LogLine)) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Bytes()
		if len(sinks) > 0 {
			logMu.Lock()
			for _, w := range sinks {
				_, _ = w.Write(line)
				_, _ = w.Write([]byte{'\n'})
			}
			logMu.Unlock()
		}
		p.mu.Lock()
		p.tail = append(p.tail, string(line))
		if len(p.tail) > tailLines {
			p.tail = p.tail[len(p.tail)-tailLines:]
		}
		p.mu.Unlock()
		if onLog != nil {
			if l, ok := ParseLogLine(line); ok {
				onLog(l)
			}
		}
	}
	// Keep draining after a too-long line so the process never blocks on a
	// full pipe.
	_, _ = io.Copy(io.Discard, r)
}

func (p *Process) closeLog() {
	if p.log != nil {
		_ = p.log.Close()
	}
}

// Name returns the process's name.
func (p *Process) Name() string { return p.spec.Name }

// Pid returns the process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Done is closed when the process has ended.
func (p *Process) Done() <-chan struct{} { return p.done }

// Err returns how the process ended; call it after Done is closed.
func (p *Process) Err() error { return p.waitErr }

// Tail returns the last lines the process wrote.
func (p *Process) Tail() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.tail, "\n")
}

// Exited returns an error describing the process's end, with its last lines.
func (p *Process) Exited() error {
	return fmt.Errorf("storm: %s exited (%w); its last lines:\n%s", p.spec.Name, p.waitErr, p.Tail())
}

// Terminate asks the process to stop (SIGTERM), as the kubelet does, waits
// up to grace for it to end, and kills its process group after that. It
// returns the process's exit error, or an error when it had to be killed.
func (p *Process) Terminate(grace time.Duration) error {
	select {
	case <-p.done:
		return p.waitErr
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.done:
		return p.waitErr
	case <-t.C:
		p.Kill()
		<-p.done
		return fmt.Errorf("storm: %s did not stop within %v of SIGTERM; killed", p.spec.Name, grace)
	}
}

// Kill kills the process's whole group at once.
func (p *Process) Kill() {
	select {
	case <-p.done:
		return
	default:
	}
	// The group id is the process id (Setpgid); a negative pid signals the
	// group.
	if err := syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL); err != nil {
		_ = p.cmd.Process.Kill()
	}
}
