package reload

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/backpressure-dev/backpressure-operator/api/plan"
)

// DefaultPollInterval is how often a DirSource reads its directory when no
// file system event arrives.
const DefaultPollInterval = 10 * time.Second

// maxFileSize bounds what a DirSource reads from one file: a ConfigMap
// holds at most 1 MiB in all.
const maxFileSize = 1 << 20

// DirOptions configure a DirSource.
type DirOptions struct {
	Options
	// PollInterval is how often the directory is read even without a file
	// system event, a backstop for missed events; zero means
	// DefaultPollInterval.
	PollInterval time.Duration
}

// DirSource reads a workload's plans from a directory, normally the
// workload's ConfigMap mounted as a volume: one file <gate>.json per gate.
//
// It watches the directory with fsnotify, which sees the kubelet's update
// (a new timestamped directory, then a rename of the "..data" symlink that
// every file reaches through), files written in place, and the directory
// itself being replaced, after which it watches again. It also reads the
// directory every PollInterval in case an event was missed. Note that the
// kubelet itself refreshes a mounted ConfigMap only after a delay of up to
// a minute or more; ConfigMapSource follows changes within a second.
//
// Mount the whole ConfigMap as a directory: the kubelet never updates a
// file mounted on its own with subPath.
//
// Files that are not named <gate>.json and the kubelet's "..*" entries are
// ignored. Writers other than the kubelet should write a new file and
// rename it into place: a partly written file is rejected like any other
// bad document (logged and counted), and the next event or poll reads the
// finished one.
//
// NewDirSource reads once and fails when there is no valid plan (unless
// Options.WaitForPlan is set); Start
// delivers what was read, then follows changes until its context ends. A
// file that disappears orphans its gate, which keeps its last plan; a
// directory that cannot be read keeps every plan. Methods are safe for
// concurrent use.
type DirSource struct {
	*core
	dir  string
	poll time.Duration

	// tick replaces the poll ticker in tests.
	tick <-chan time.Time
	// noWatch turns fsnotify off in tests of the poll backstop.
	noWatch bool
	// started, when set in tests, is closed once Start's first read is
	// done, so a test can change the volume after it and not during it.
	started chan struct{}
}

// NewDirSource reads dir and returns a source holding its valid plans. It
// returns an error, without starting anything, when dir cannot be read or
// holds no valid plan (the error then matches ErrNoPlan); invalid documents
// beside valid ones are logged and counted, not fatal. With
// Options.WaitForPlan it reads dir until it holds a plan or the wait has
// passed, and then returns the source, empty or not.
func NewDirSource(dir string, opts DirOptions) (*DirSource, error) {
	if dir == "" {
		return nil, errors.New("reload: NewDirSource needs a directory")
	}
	c, err := newCore(opts.Options, nil)
	if err != nil {
		return nil, err
	}
	s := &DirSource{core: c, dir: filepath.Clean(dir), poll: opts.PollInterval}
	if s.poll <= 0 {
		s.poll = DefaultPollInterval
	}
	s.log = s.log.WithValues("dir", s.dir)
	s.tracker.log = s.log

	err = s.readFirst(context.Background(), opts.WaitForPlan, "directory "+s.dir,
		func(context.Context) (map[string]entry, error) {
			snap, err := readDir(s.dir)
			if err != nil {
				return nil, fmt.Errorf("reload: %w", err)
			}
			return snap, nil
		})
	if err != nil {
		return nil, err
	}
	return s, nil
}

// Plans returns the plan in force for every gate, keyed by gate name.
func (s *DirSource) Plans() map[string]plan.Document { return s.plans() }

// Start delivers the plans read so far to the subscriber, then watches the
// directory and delivers every change until ctx ends. It runs on the
// calling goroutine, beside fsnotify's reader goroutine and, when
// acknowledgement is on, one that patches the pod; all have stopped when
// Start returns. Start returns nil when ctx
// ends, and an error when called twice.
func (s *DirSource) Start(ctx context.Context) error {
	return s.start(ctx, s.run)
}

func (s *DirSource) run(ctx context.Context) {
	tick := s.tick
	if tick == nil {
		t := time.NewTicker(s.poll)
		defer t.Stop()
		tick = t.C
	}
	var w *fsnotify.Watcher
	if !s.noWatch {
		w = s.watch(nil)
	}
	defer func() {
		if w != nil {
			_ = w.Close()
		}
	}()
	watching := w != nil && len(w.WatchList()) > 0
	// Whatever changed between NewDirSource and the watch is read now.
	s.reload()
	if s.started != nil {
		close(s.started)
	}

	for {
		var events <-chan fsnotify.Event
		var errs <-chan error
		if w != nil {
			events, errs = w.Events, w.Errors
		}
		select {
		case <-ctx.Done():
			return
		case ev := <-events:
			if filepath.Clean(ev.Name) == s.dir && ev.Has(fsnotify.Remove|fsnotify.Rename) {
				// The directory itself went away and its watch with it.
				// It may be back already; if not, the next poll retries.
				_ = w.Remove(s.dir)
				watching = s.add(w)
			}
			if ev.Op == fsnotify.Chmod {
				continue
			}
			s.reload()
		case err := <-errs:
			// Most likely an overflow: events were lost, so read anew.
			s.log.Error(err, "File system watch reported an error; reading the directory again")
			s.reload()
		case <-tick:
			if !s.noWatch && !watching {
				w = s.watch(w)
				watching = w != nil && len(w.WatchList()) > 0
			}
			s.reload()
		}
	}
}

// watch returns w, or a new watcher if w is nil, with the directory added
// if possible; nil if no watcher could be made.
func (s *DirSource) watch(w *fsnotify.Watcher) *fsnotify.Watcher {
	if w == nil {
		var err error
		if w, err = fsnotify.NewWatcher(); err != nil {
			s.log.Error(err, "Could not watch the directory; relying on polling", "pollInterval", s.poll)
			return nil
		}
	}
	s.add(w)
	return w
}

func (s *DirSource) add(w *fsnotify.Watcher) bool {
	if err := w.Add(s.dir); err != nil {
		s.log.V(1).Info("Could not watch the directory yet; will retry at the next poll", "err", err.Error())
		return false
	}
	return true
}

func (s *DirSource) reload() {
	snap, err := readDir(s.dir)
	if err != nil {
		s.tracker.sourceFailed(err)
		return
	}
	s.load(snap)
}

// readDir reads every plan file of dir, following symbolic links.
func readDir(dir string) (map[string]entry, error) {
	names, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	snap := make(map[string]entry, len(names))
	for _, de := range names {
		name := de.Name()
		if strings.HasPrefix(name, "..") || !strings.HasSuffix(name, plan.KeySuffix) {
			continue
		}
		data, err := readFile(filepath.Join(dir, name))
		switch {
		case errors.Is(err, fs.ErrNotExist):
			// Removed since the listing: the next read sees it gone.
		case err != nil:
			snap[name] = entry{readErr: err.Error()}
		default:
			snap[name] = entry{data: string(data)}
		}
	}
	return snap, nil
}

func readFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	data, err := io.ReadAll(io.LimitReader(f, maxFileSize+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxFileSize {
		return nil, fmt.Errorf("larger than %d bytes", maxFileSize)
	}
	return data, nil
}
