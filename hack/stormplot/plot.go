package main

import (
	"errors"
	"fmt"
	"image/color"
	"os"
	"path/filepath"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm"
	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm/cluster"
	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm/report"
)

// Colours of the plot.
var (
	colInFlight = color.RGBA{R: 0x1f, G: 0x5f, B: 0xbf, A: 0xff}
	colContract = color.RGBA{R: 0xd0, G: 0x20, B: 0x20, A: 0xff}
	colHanded   = color.RGBA{R: 0x80, G: 0x80, B: 0x80, A: 0xff}
	colPermits  = color.RGBA{R: 0xe0, G: 0x80, B: 0x10, A: 0xff}
	col429      = color.RGBA{R: 0xd0, G: 0x20, B: 0x20, A: 0xff}
	colOK       = color.RGBA{R: 0x20, G: 0x90, B: 0x40, A: 0xff}
	colJitter   = color.NRGBA{R: 0xff, G: 0xc8, B: 0x60, A: 0x50}
	colDesired  = color.RGBA{R: 0x80, G: 0x40, B: 0xa0, A: 0xff}
	colReady    = color.RGBA{R: 0x20, G: 0x90, B: 0x40, A: 0xff}
)

// writePlot draws the report as a PNG at path: for every variant, the
// downstream's in-flight calls against the contract (left) and its 429s
// and successes per second (right); below, the HPA's decisions in the first
// variant's run (its desired replicas, the Deployment's replicas and the
// Ready pods) and the metric it scaled on against its target, and the
// downstream's latency. The downstream's slow stretch is shaded.
func writePlot(r *report.Report, path string) error {
	if len(r.Order) == 0 {
		return errors.New("stormplot: nothing to plot")
	}
	for _, name := range r.Order {
		if r.Variants[name] == nil {
			return fmt.Errorf("stormplot: order names variant %q, which variants lack", name)
		}
	}
	var rows [][]*plot.Plot
	tmax := r.DurationSeconds
	var last *report.VariantReport
	// One in-flight scale for every variant, so that the panels compare;
	// the naive variant's limits go off it.
	ymax := 2 * float64(r.Contract)
	for _, v := range r.Variants {
		ymax = max(ymax, float64(v.PeakInFlight)*headroom)
	}
	for _, name := range r.Order {
		v := r.Variants[name]
		last = v
		left, err := inFlightPlot(r, v, tmax, ymax)
		if err != nil {
			return err
		}
		right, err := ratePlot(v, tmax)
		if err != nil {
			return err
		}
		rows = append(rows, []*plot.Plot{left, right})
	}
	// The HPA's decisions, and the metric it scaled on, in the first
	// variant's run (the operator's, when it ran); the downstream's latency.
	first := r.Variants[r.Order[0]]
	reps, err := replicaPlot(first, tmax)
	if err != nil {
		return err
	}
	metric, err := hpaMetricPlot(first, tmax)
	if err != nil {
		return err
	}
	rows = append(rows, []*plot.Plot{reps, metric})
	lat, err := latencyPlot(last, tmax)
	if err != nil {
		return err
	}
	rows = append(rows, []*plot.Plot{lat, nil})

	const colWidth, rowHeight = 7 * vg.Inch, 2.6 * vg.Inch
	img := vgimg.NewWith(vgimg.UseWH(2*colWidth, vg.Length(len(rows))*rowHeight), vgimg.UseDPI(96))
	dc := draw.New(img)
	tiles := draw.Tiles{
		Rows: len(rows), Cols: 2,
		PadX: vg.Points(18), PadY: vg.Points(14),
		PadTop: vg.Points(8), PadBottom: vg.Points(8), PadLeft: vg.Points(8), PadRight: vg.Points(12),
	}
	canvases := plot.Align(rows, tiles, dc)
	for j := range rows {
		for i := range rows[j] {
			if rows[j][i] != nil {
				rows[j][i].Draw(canvases[j][i])
			}
		}
	}
	return writePNG(img, path)
}

func newPlot(title, ylabel string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.Title.TextStyle.Font.Size = vg.Points(12)
	p.X.Label.Text = "seconds"
	p.Y.Label.Text = ylabel
	p.Legend.Top = true
	p.Legend.TextStyle.Font.Size = vg.Points(9)
	p.X.Tick.Marker = wholeTicks{}
	p.Y.Tick.Marker = wholeTicks{}
	return p
}

// fixAxes sets the axes' ranges; it comes after the plotters are added,
// which widen the axes to their data.
func fixAxes(p *plot.Plot, tmax, ymax float64) {
	p.X.Min, p.X.Max = 0, tmax
	p.Y.Min, p.Y.Max = 0, ymax
}

// headroom is how far above the data the y axis goes, so that the legend in
// the top corner does not hide it.
const headroom = 1.45

// wholeTicks are gonum's default ticks with plain labels (50, not 50.00).
type wholeTicks struct{}

// Ticks returns the default ticks between lo and hi, labelled with %g.
func (wholeTicks) Ticks(lo, hi float64) []plot.Tick {
	ticks := plot.DefaultTicks{}.Ticks(lo, hi)
	for i := range ticks {
		if ticks[i].Label != "" {
			ticks[i].Label = strconv.FormatFloat(ticks[i].Value, 'g', 4, 64)
		}
	}
	return ticks
}

// shadeSlow shades the stretches where the downstream was slower than its
// typical latency, up to ymax.
func shadeSlow(p *plot.Plot, v *report.VariantReport, ymax float64, legend bool) error {
	var from float64
	slow := false
	var polys []*plotter.Polygon
	flush := func(to float64) error {
		poly, err := plotter.NewPolygon(plotter.XYs{{X: from, Y: 0}, {X: to, Y: 0}, {X: to, Y: ymax}, {X: from, Y: ymax}})
		if err != nil {
			return err
		}
		poly.Color = colJitter
		poly.Width = 0
		polys = append(polys, poly)
		return nil
	}
	for _, pt := range v.Timeline {
		isSlow := pt.LatencySeconds > storm.TypicalLatency.Seconds()
		switch {
		case isSlow && !slow:
			from = pt.At
		case !isSlow && slow:
			if err := flush(pt.At); err != nil {
				return err
			}
		}
		slow = isSlow
	}
	if slow && len(v.Timeline) > 0 {
		if err := flush(v.Timeline[len(v.Timeline)-1].At); err != nil {
			return err
		}
	}
	for i, poly := range polys {
		p.Add(poly)
		if legend && i == 0 {
			p.Legend.Add(fmt.Sprintf("downstream latency %v", storm.WorstLatency), poly)
		}
	}
	// The grid goes over the shading, the data over both.
	p.Add(plotter.NewGrid())
	return nil
}

func line(xys plotter.XYs, c color.Color, width vg.Length, dashed bool) (*plotter.Line, error) {
	l, err := plotter.NewLine(xys)
	if err != nil {
		return nil, err
	}
	l.Color = c
	l.Width = width
	if dashed {
		l.Dashes = []vg.Length{vg.Points(6), vg.Points(3)}
	}
	return l, nil
}

func inFlightPlot(r *report.Report, v *report.VariantReport, tmax, ymax float64) (*plot.Plot, error) {
	p := newPlot(fmt.Sprintf("%s: calls in flight at the downstream (peak %d)", v.Name, v.PeakInFlight), "in flight")
	if err := shadeSlow(p, v, ymax, false); err != nil {
		return nil, err
	}
	xys := make(plotter.XYs, len(v.Timeline))
	for i, pt := range v.Timeline {
		xys[i] = plotter.XY{X: pt.At, Y: float64(pt.InFlight)}
	}
	inflight, err := line(xys, colInFlight, vg.Points(1.2), false)
	if err != nil {
		return nil, err
	}
	contract, err := line(plotter.XYs{{X: 0, Y: float64(r.Contract)}, {X: tmax, Y: float64(r.Contract)}}, colContract, vg.Points(1.5), true)
	if err != nil {
		return nil, err
	}
	handed := float64(r.Contract*r.SafetyPercent) / 100
	safety, err := line(plotter.XYs{{X: 0, Y: handed}, {X: tmax, Y: handed}}, colHanded, vg.Points(1), true)
	if err != nil {
		return nil, err
	}
	perm := make(plotter.XYs, len(v.Timeline))
	most := 0
	for i, pt := range v.Timeline {
		perm[i] = plotter.XY{X: pt.At, Y: float64(pt.Permits)}
		most = max(most, pt.Permits)
	}
	permits, err := line(perm, colPermits, vg.Points(1.2), false)
	if err != nil {
		return nil, err
	}
	p.Add(safety, contract, permits, inflight)
	p.Legend.Add("in flight (peak per 100 ms)", inflight)
	if label := "pods' permits in all"; float64(most) > ymax {
		p.Legend.Add(fmt.Sprintf("%s: up to %d, off the scale", label, most), permits)
	} else {
		p.Legend.Add(label, permits)
	}
	if v.Capacity != nil {
		// The operator's Ready pods against what the previous division
		// would have given them on the same pod timeline.
		ready, prev := make(plotter.XYs, len(v.Timeline)), make(plotter.XYs, len(v.Timeline))
		for i, pt := range v.Timeline {
			ready[i] = plotter.XY{X: pt.At, Y: float64(pt.ReadyPermits)}
			prev[i] = plotter.XY{X: pt.At, Y: float64(pt.PreviousReadyPermits)}
		}
		lr, err := line(ready, colReady, vg.Points(1.2), false)
		if err != nil {
			return nil, err
		}
		lp, err := line(prev, colDesired, vg.Points(1), true)
		if err != nil {
			return nil, err
		}
		p.Add(lp, lr)
		p.Legend.Add(fmt.Sprintf("Ready pods' permits (%.1f%% of usable × time)", 100*v.Capacity.HeldFraction), lr)
		p.Legend.Add(fmt.Sprintf("same, previous division (%.1f%%)", 100*v.Capacity.PreviousHeldFraction), lp)
		if v.Laggard != "" {
			prun := make(plotter.XYs, len(v.Timeline))
			for i, pt := range v.Timeline {
				prun[i] = plotter.XY{X: pt.At, Y: float64(pt.PreviousPermits)}
			}
			lpr, err := line(prun, col429, vg.Points(1), true)
			if err != nil {
				return nil, err
			}
			p.Add(lpr)
			p.Legend.Add(fmt.Sprintf("previous division, all pods' permits with the laggard (peak %d)", v.Capacity.PreviousPeakPermits), lpr)
		}
	}
	p.Legend.Add(fmt.Sprintf("contract: %d", r.Contract), contract)
	p.Legend.Add(fmt.Sprintf("handed out: %d%%", r.SafetyPercent), safety)
	fixAxes(p, tmax, ymax)
	return p, nil
}

func ratePlot(v *report.VariantReport, tmax float64) (*plot.Plot, error) {
	p := newPlot(fmt.Sprintf("%s: downstream answers per second (%d × 429 in all)", v.Name, v.Downstream429), "per second")
	// Per-second rates from the 100 ms samples, over a 2 s moving window:
	// calls of one latency complete in waves that a shorter one aliases.
	const window = 20
	n := len(v.Timeline)
	rej, ok := make(plotter.XYs, n), make(plotter.XYs, n)
	var sumRej, sumOK int64
	ymax := 10.0
	for i, pt := range v.Timeline {
		sumRej += pt.Rejected429
		sumOK += pt.OK
		if i >= window {
			sumRej -= v.Timeline[i-window].Rejected429
			sumOK -= v.Timeline[i-window].OK
		}
		span := float64(min(i+1, window)) * report.SampleInterval.Seconds()
		rej[i] = plotter.XY{X: pt.At, Y: float64(sumRej) / span}
		ok[i] = plotter.XY{X: pt.At, Y: float64(sumOK) / span}
		ymax = max(ymax, rej[i].Y*headroom, ok[i].Y*headroom)
	}
	if err := shadeSlow(p, v, ymax, false); err != nil {
		return nil, err
	}
	lrej, err := line(rej, col429, vg.Points(1.2), false)
	if err != nil {
		return nil, err
	}
	lok, err := line(ok, colOK, vg.Points(1.2), false)
	if err != nil {
		return nil, err
	}
	p.Add(lok, lrej)
	p.Legend.Add("429 (rejected)", lrej)
	p.Legend.Add("200 (goodput)", lok)
	fixAxes(p, tmax, ymax)
	return p, nil
}

func replicaPlot(v *report.VariantReport, tmax float64) (*plot.Plot, error) {
	p := newPlot("the HPA ("+v.Name+" run): replicas", "pods")
	ymax := 4.0
	n := len(v.Timeline)
	desired, ready := make(plotter.XYs, n), make(plotter.XYs, n)
	var hpa plotter.XYs
	for i, pt := range v.Timeline {
		desired[i] = plotter.XY{X: pt.At, Y: float64(pt.Desired)}
		// Before the HPA controller's first decision its status is empty.
		if pt.HPADesired > 0 {
			hpa = append(hpa, plotter.XY{X: pt.At, Y: float64(pt.HPADesired)})
		}
		ready[i] = plotter.XY{X: pt.At, Y: float64(pt.Ready)}
		ymax = max(ymax, float64(pt.Desired)*headroom, float64(pt.Existing)*headroom, float64(pt.HPADesired)*headroom)
	}
	if err := shadeSlow(p, v, ymax, true); err != nil {
		return nil, err
	}
	if len(hpa) > 0 {
		lh, err := line(hpa, colHanded, vg.Points(3), false)
		if err != nil {
			return nil, err
		}
		p.Add(lh)
		p.Legend.Add("HPA desiredReplicas", lh)
	}
	ld, err := line(desired, colDesired, vg.Points(1.5), true)
	if err != nil {
		return nil, err
	}
	lr, err := line(ready, colReady, vg.Points(1.5), false)
	if err != nil {
		return nil, err
	}
	p.Add(ld, lr)
	p.Legend.Add("Deployment replicas", ld)
	p.Legend.Add("ready pods", lr)
	fixAxes(p, tmax, ymax)
	return p, nil
}

// hpaMetricPlot draws the current value of the metric the HPA scaled on, as
// the HPA controller wrote it in its status, against its target.
func hpaMetricPlot(v *report.VariantReport, tmax float64) (*plot.Plot, error) {
	title, ylabel := "the HPA's metric: calls each pod would have in flight", "calls per pod"
	if v.HPAMetric == cluster.ReplicasMetric {
		title, ylabel = "the HPA's metric: replicas the scenario asks for", "replicas"
	}
	p := newPlot(title+" ("+v.Name+" run)", ylabel)
	ymax := v.HPATarget * 2
	var xys plotter.XYs
	for _, pt := range v.Timeline {
		if pt.HPAMetric != nil {
			xys = append(xys, plotter.XY{X: pt.At, Y: *pt.HPAMetric})
			ymax = max(ymax, *pt.HPAMetric*headroom)
		}
	}
	if err := shadeSlow(p, v, ymax, false); err != nil {
		return nil, err
	}
	target, err := line(plotter.XYs{{X: 0, Y: v.HPATarget}, {X: tmax, Y: v.HPATarget}}, colContract, vg.Points(1), true)
	if err != nil {
		return nil, err
	}
	p.Add(target)
	p.Legend.Add(fmt.Sprintf("target %g", v.HPATarget), target)
	if len(xys) > 0 {
		l, err := line(xys, colInFlight, vg.Points(1.5), false)
		if err != nil {
			return nil, err
		}
		p.Add(l)
		p.Legend.Add(v.HPAMetric+" (HPA status)", l)
	}
	fixAxes(p, tmax, ymax)
	return p, nil
}

func latencyPlot(v *report.VariantReport, tmax float64) (*plot.Plot, error) {
	p := newPlot("the downstream: latency", "seconds")
	xys := make(plotter.XYs, len(v.Timeline))
	ymax := 0.5
	for i, pt := range v.Timeline {
		xys[i] = plotter.XY{X: pt.At, Y: pt.LatencySeconds}
		ymax = max(ymax, pt.LatencySeconds*headroom)
	}
	if err := shadeSlow(p, v, ymax, false); err != nil {
		return nil, err
	}
	l, err := line(xys, colInFlight, vg.Points(1.5), false)
	if err != nil {
		return nil, err
	}
	p.Add(l)
	p.Legend.Add("latency of a call", l)
	fixAxes(p, tmax, ymax)
	return p, nil
}

// colCallers are the callers' colours in the two-callers plot.
var colCallers = []color.Color{
	color.RGBA{R: 0x1f, G: 0x5f, B: 0xbf, A: 0xff},
	color.RGBA{R: 0xe0, G: 0x80, B: 0x10, A: 0xff},
	color.RGBA{R: 0x20, G: 0x90, B: 0x40, A: 0xff},
}

// writeCallersPlot draws the two-callers scenario as a PNG at path: the
// shared downstream's calls in flight against the contract with each
// caller's Ready pods' permits and their fair parts (left), and each
// caller's Ready pods (right).
func writeCallersPlot(r *report.CallersReport, path string) error {
	if len(r.Timeline) == 0 {
		return errors.New("stormplot: nothing to plot")
	}
	tmax := r.DurationSeconds
	left := newPlot(fmt.Sprintf("two callers, one contract: in flight at the downstream (peak %d)", r.PeakInFlight), "in flight / permits")
	p := left
	p.Add(plotter.NewGrid())
	ymax := max(float64(r.Contract), float64(r.PeakInFlight)) * headroom
	xys := make(plotter.XYs, len(r.Timeline))
	for i, pt := range r.Timeline {
		xys[i] = plotter.XY{X: pt.At, Y: float64(pt.InFlight)}
	}
	inflight, err := line(xys, color.Black, vg.Points(1.2), false)
	if err != nil {
		return err
	}
	contract, err := line(plotter.XYs{{X: 0, Y: float64(r.Contract)}, {X: tmax, Y: float64(r.Contract)}}, colContract, vg.Points(1.5), true)
	if err != nil {
		return err
	}
	p.Add(contract, inflight)
	p.Legend.Add("in flight, both callers (peak per 100 ms)", inflight)
	p.Legend.Add(fmt.Sprintf("contract: %d", r.Contract), contract)
	right := newPlot("each caller's autoscaler: Ready pods", "pods")
	right.Add(plotter.NewGrid())
	podMax := 4.0
	for ci, c := range r.Callers {
		col := colCallers[ci%len(colCallers)]
		perm, ready := make(plotter.XYs, len(r.Timeline)), make(plotter.XYs, len(r.Timeline))
		for i, pt := range r.Timeline {
			if ci < len(pt.ReadyPermits) {
				perm[i] = plotter.XY{X: pt.At, Y: float64(pt.ReadyPermits[ci])}
				ready[i] = plotter.XY{X: pt.At, Y: float64(pt.Ready[ci])}
				podMax = max(podMax, float64(pt.Ready[ci])*headroom)
			}
		}
		lp, err := line(perm, col, vg.Points(1.2), false)
		if err != nil {
			return err
		}
		fair, err := line(plotter.XYs{{X: 0, Y: float64(c.FairPart)}, {X: tmax, Y: float64(c.FairPart)}}, col, vg.Points(0.8), true)
		if err != nil {
			return err
		}
		lr, err := line(ready, col, vg.Points(1.5), false)
		if err != nil {
			return err
		}
		left.Add(fair, lp)
		left.Legend.Add(fmt.Sprintf("%s: Ready pods' permits (fair part %d, dashed)", c.Name, c.FairPart), lp)
		right.Add(lr)
		right.Legend.Add(c.Name, lr)
	}
	fixAxes(left, tmax, ymax)
	fixAxes(right, tmax, podMax)

	rows := [][]*plot.Plot{{left, right}}
	const colWidth, rowHeight = 7 * vg.Inch, 3 * vg.Inch
	img := vgimg.NewWith(vgimg.UseWH(2*colWidth, rowHeight), vgimg.UseDPI(96))
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 1, Cols: 2, PadX: vg.Points(18), PadY: vg.Points(14),
		PadTop: vg.Points(8), PadBottom: vg.Points(8), PadLeft: vg.Points(8), PadRight: vg.Points(12)}
	canvases := plot.Align(rows, tiles, dc)
	left.Draw(canvases[0][0])
	right.Draw(canvases[0][1])
	return writePNG(img, path)
}

// writePNG writes img to path, creating its directory.
func writePNG(img *vgimg.Canvas, path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}
