// Package podmain is what the storm's pod programs (proxypod, laggardpod)
// share: each runs as one pod would, until SIGTERM, and says why it failed
// in a JSON log line, as the harness reads a pod's log.
package podmain

import (
	"context"
	"encoding/json"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// Main parses the command line with parse and calls run with a context
// that SIGTERM or an interrupt ends. When either fails it logs failed with
// the error and exits 1.
func Main[C any](parse func(args []string) (C, error), run func(context.Context, C) error, failed string) {
	c, err := parse(os.Args[1:])
	if err == nil {
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
		err = run(ctx, c)
		stop()
	}
	if err != nil {
		LogLine(failed, err.Error())
		os.Exit(1)
	}
}

// LogLine writes one JSON log line of the program's own to stderr, at level
// ERROR.
func LogLine(msg, err string) {
	b, _ := json.Marshal(map[string]string{"time": time.Now().Format(time.RFC3339Nano), "level": "ERROR", "msg": msg, "err": err})
	_, _ = os.Stderr.Write(append(b, '\n'))
}
