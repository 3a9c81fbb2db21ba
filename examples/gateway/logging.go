package main

import (
	"io"
	"log/slog"
	"strings"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"
)

// newLogger returns the process's logger: JSON, one object per line, with
// RFC 3339 times to the nanosecond. client-go, which logs through klog,
// is routed to it too, so that every line on stderr is JSON.
func newLogger(w io.Writer) *slog.Logger {
	h := slog.NewJSONHandler(w, nil)
	klog.SetLogger(logr.FromSlogHandler(h))
	return slog.New(h)
}

// oneLine flattens an error that joins several (one per line) into a single
// line, for the one-line error of a failed start.
func oneLine(err error) string {
	return strings.ReplaceAll(err.Error(), "\n", "; ")
}
