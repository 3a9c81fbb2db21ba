package main

import (
	"image"
	"image/color"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm/report"
)

// syntheticReport is a storm report of two variants over 30 s: the
// operator's holds 30 calls in flight, the naive one 70 with 429s, and the
// downstream is slow from 10 s to 15 s.
func syntheticReport() *report.Report {
	r := &report.Report{Contract: 50, SafetyPercent: 80, DurationSeconds: 30, Variants: map[string]*report.VariantReport{}}
	for _, name := range []string{"operator", "naive"} {
		v := &report.VariantReport{Name: name, HPAMetric: "inflight_per_pod", HPATarget: 5}
		inflight, rejected := int64(30), int64(0)
		if name == "naive" {
			inflight, rejected = 70, 4
		}
		for i := range 300 {
			at := float64(i) / 10
			latency := 0.2
			if at >= 10 && at < 15 {
				latency = 2
			}
			m := 4.5
			v.Timeline = append(v.Timeline, report.TimelinePoint{
				At: at, InFlight: inflight, Rejected429: rejected, OK: 15, Desired: 8, Existing: 8, Ready: 8,
				LatencySeconds: latency, Permits: 40, ReadyPermits: 40, HPADesired: 8, HPAMetric: &m,
			})
		}
		v.PeakInFlight = inflight
		v.Downstream429 = rejected * 300
		if name == "operator" {
			v.Capacity = &report.CapacityReport{Usable: 40, HeldFraction: 0.97, PreviousHeldFraction: 0.8}
		}
		r.Order = append(r.Order, name)
		r.Variants[name] = v
	}
	return r
}

// decodePNG reads the PNG at path and fails the test unless it is big
// enough to read.
func decodePNG(t *testing.T, path string, minW, minH int) image.Image {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	if b := img.Bounds(); b.Dx() < minW || b.Dy() < minH {
		t.Fatalf("plot is %v; too small to read", b)
	}
	return img
}

// pixels counts the pixels of img within b that are exactly c.
func pixels(img image.Image, b image.Rectangle, c color.Color) int {
	want := color.RGBAModel.Convert(c)
	n := 0
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			if color.RGBAModel.Convert(img.At(x, y)) == want {
				n++
			}
		}
	}
	return n
}

// TestStormReport draws a report as the storm writes it, read back from its
// JSON file: one row per variant and two more, and the in-flight lines drawn.
func TestStormReport(t *testing.T) {
	dir := t.TempDir()
	in, out := filepath.Join(dir, "report.json"), filepath.Join(dir, "plots", "storm.png")
	if err := syntheticReport().WriteJSON(in); err != nil {
		t.Fatal(err)
	}
	if err := run(in, out); err != nil {
		t.Fatal(err)
	}
	img := decodePNG(t, out, 1000, 4*240)
	// The in-flight panels are the left column's first two rows (of four);
	// each has a flat in-flight line across its width.
	b := img.Bounds()
	panels := image.Rect(b.Min.X, b.Min.Y, b.Min.X+b.Dx()/2, b.Min.Y+b.Dy()/2)
	if n := pixels(img, panels, colInFlight); n < 2*400 {
		t.Errorf("%d pixels of the in-flight colour in the in-flight panels; their lines are missing", n)
	}
}

// TestCallersReport draws the two-callers report.
func TestCallersReport(t *testing.T) {
	r := &report.CallersReport{Contract: 50, Usable: 40, DurationSeconds: 20, PeakInFlight: 38,
		Callers: []report.CallerReport{{Name: "checkout-gateway", FairPart: 16}, {Name: "search-gateway", FairPart: 24}}}
	for i := range 200 {
		r.Timeline = append(r.Timeline, report.CallersPoint{At: float64(i) / 10, InFlight: 38, ReadyPermits: []int{16, 24}, Ready: []int{2, 3}})
	}
	dir := t.TempDir()
	in, out := filepath.Join(dir, "report-two-callers.json"), filepath.Join(dir, "storm-two-callers.png")
	if err := r.WriteJSON(in); err != nil {
		t.Fatal(err)
	}
	if err := run(in, out); err != nil {
		t.Fatal(err)
	}
	img := decodePNG(t, out, 1000, 250)
	for i, c := range colCallers[:2] {
		if n := pixels(img, img.Bounds(), c); n < 400 {
			t.Errorf("%d pixels of caller %d's colour; its lines are missing", n, i)
		}
	}
}

// TestRejects: what is not a report of the storm, or one with nothing in
// it, is an error and writes no file.
func TestRejects(t *testing.T) {
	for name, tc := range map[string]struct{ json, want string }{
		"not JSON":        {`variants`, "invalid character"},
		"neither":         {`{"contract": 50}`, "neither variants"},
		"both":            {`{"variants": {}, "callers": []}`, "both variants and callers"},
		"unknown field":   {`{"variants": {}, "order": [], "extra": 1}`, `unknown field "extra"`},
		"no variants":     {`{"variants": {}, "order": []}`, "nothing to plot"},
		"empty timeline":  {`{"callers": [], "timeline": []}`, "nothing to plot"},
		"variant missing": {`{"variants": {}, "order": ["operator"]}`, "operator"},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			in, out := filepath.Join(dir, "report.json"), filepath.Join(dir, "storm.png")
			if err := os.WriteFile(in, []byte(tc.json), 0o644); err != nil {
				t.Fatal(err)
			}
			err := run(in, out)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), in) {
				t.Errorf("run = %v; want an error naming %s and containing %q", err, in, tc.want)
			}
			if _, statErr := os.Stat(out); !os.IsNotExist(statErr) {
				t.Errorf("%s was written (%v)", out, statErr)
			}
		})
	}
}
