// Command stormplot draws a report of the 429 storm (test/e2e/cmd/storm,
// `make demo`, `make e2e`) as a PNG: the storm report (report.json,
// report-laggard.json) or the two-callers report (report-two-callers.json),
// told apart by their fields.
//
// It is a module of its own so that its plotting library, gonum, stays out of
// the module graph of every application that requires backpressure-operator.
// The storm's WritePlot and WriteCallersPlot run it, so `make demo` writes
// storm.png beside report.json as before; to draw a report again by hand,
// from this directory:
//
//	go run . -o ../../_output/storm/storm.png ../../_output/storm/report.json
//	go run . -o storm.png < report.json
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm/report"
)

func main() {
	out := flag.String("o", "", "the PNG file to write (required)")
	flag.Usage = func() {
		fmt.Fprintln(flag.CommandLine.Output(), "usage: stormplot -o storm.png [report.json]  (the report from standard input when no file or -)")
		flag.PrintDefaults()
	}
	flag.Parse()
	if *out == "" || flag.NArg() > 1 {
		flag.Usage()
		os.Exit(2)
	}
	name := flag.Arg(0)
	if err := run(name, *out); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// run reads the report at name (standard input for "" or "-") and draws it
// at out.
func run(name, out string) error {
	var data []byte
	var err error
	if name == "" || name == "-" {
		name = "standard input"
		data, err = io.ReadAll(os.Stdin)
	} else {
		data, err = os.ReadFile(name)
	}
	if err != nil {
		return fmt.Errorf("stormplot: %w", err)
	}
	if err := drawReport(data, out); err != nil {
		return fmt.Errorf("stormplot: %s: %w", name, err)
	}
	return nil
}

// drawReport draws the report in data at out. A storm report has variants, a
// two-callers report has callers; a report with neither is an error rather
// than an empty picture.
func drawReport(data []byte, out string) error {
	var kind struct {
		Variants json.RawMessage `json:"variants"`
		Callers  json.RawMessage `json:"callers"`
	}
	if err := json.Unmarshal(data, &kind); err != nil {
		return err
	}
	switch {
	case kind.Variants != nil && kind.Callers != nil:
		return errors.New("both variants and callers: not a report of the storm")
	case kind.Variants != nil:
		var r report.Report
		if err := decode(data, &r); err != nil {
			return err
		}
		return writePlot(&r, out)
	case kind.Callers != nil:
		var r report.CallersReport
		if err := decode(data, &r); err != nil {
			return err
		}
		return writeCallersPlot(&r, out)
	}
	return errors.New("neither variants (a storm report) nor callers (a two-callers report)")
}

// decode unmarshals data into v, refusing fields v lacks: a report written
// by another version of the storm than the one this command was built with
// would otherwise be drawn with some of its lines missing.
func decode(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}
