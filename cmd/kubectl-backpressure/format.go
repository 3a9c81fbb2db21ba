package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/printers"
	"sigs.k8s.io/yaml"

	"github.com/backpressure-dev/backpressure-operator/internal/sizing"
)

// Output formats of every subcommand but status, which takes kubectl's
// own: a table, or the figures as data in JSON, YAML or through a template
// as kubectl takes one (jsonpath=..., jsonpath-as-json=..., jsonpath-file=...,
// go-template=..., go-template-file=..., template=..., templatefile=...).
const (
	outputTable = "table"
	outputJSON  = "json"
	outputYAML  = "yaml"
)

// outputFormats is what --output's error and help say it takes.
const outputFormats = "table, json, yaml, jsonpath=..., jsonpath-as-json=..., jsonpath-file=..., go-template=... or go-template-file=..."

// structured reports whether format asks for the figures as data rather
// than as tables.
func structured(format string) bool { return format != outputTable }

// checkOutput fails unless format is one the commands write.
func checkOutput(format string) error {
	switch format {
	case outputTable, outputJSON, outputYAML:
		return nil
	}
	if _, err := templatePrinter(format); err != nil {
		return fmt.Errorf("--output: must be %s, got %q", outputFormats, format)
	}
	return nil
}

// templatePrinter returns kubectl's printer for a template format; it
// refuses every other format.
func templatePrinter(format string) (printers.ResourcePrinter, error) {
	name, _, _ := strings.Cut(format, "=")
	if _, ok := templateFormats[name]; !ok {
		return nil, fmt.Errorf("not a template format: %q", format)
	}
	flags := genericclioptions.NewPrintFlags("")
	flags.OutputFormat = &format
	return flags.ToPrinter()
}

// templateFormats are the formats of kubectl's template printers.
var templateFormats = map[string]bool{
	"jsonpath": true, "jsonpath-as-json": true, "jsonpath-file": true,
	"go-template": true, "go-template-file": true, "template": true, "templatefile": true,
}

// writeOutput writes v, the figures a table would show, in format: JSON as
// writeJSON does, YAML with the same fields, or v's JSON through a
// template.
func writeOutput(out io.Writer, format string, v any) error {
	switch format {
	case outputJSON:
		return writeJSON(out, v)
	case outputYAML:
		data, err := json.Marshal(v)
		if err != nil {
			return err
		}
		y, err := yaml.JSONToYAML(data)
		if err != nil {
			return err
		}
		_, err = out.Write(y)
		return err
	}
	printer, err := templatePrinter(format)
	if err != nil {
		return err
	}
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	var obj map[string]any
	if err := json.Unmarshal(data, &obj); err != nil {
		return err
	}
	return printer.PrintObj(&unstructured.Unstructured{Object: obj}, out)
}

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
