package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/backpressure-dev/backpressure-operator/internal/sizing"
)

// Output formats of every subcommand.
const (
	outputTable = "table"
	outputJSON  = "json"
)

// The figures of a table are formatted as sizing formats the figures of the
// status's messages, so that both read the same.
var (
	num     = sizing.Num
	perSec  = sizing.Rate
	percent = sizing.Percent
)

// yesNo formats a boolean for a table.
func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// readable rounds a computed duration to a millisecond (a microsecond below
// one millisecond) for a table.
func readable(d time.Duration) string {
	if d >= time.Millisecond {
		return d.Round(time.Millisecond).String()
	}
	return d.Round(time.Microsecond).String()
}

// seconds converts a duration to seconds for the JSON output.
func seconds(d time.Duration) float64 { return d.Seconds() }

// table writes aligned rows; Flush must be called.
type table struct{ w *tabwriter.Writer }

func newTable(out io.Writer, header ...string) *table {
	t := &table{w: tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)}
	t.row(header...)
	return t
}

func (t *table) row(cells ...string) { fmt.Fprintln(t.w, strings.Join(cells, "\t")) }

func (t *table) flush() error { return t.w.Flush() }

// writeJSON writes v indented, with a final newline.
func writeJSON(out io.Writer, v any) error {
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
