// Command storm is the project's demonstration: it reproduces the 429 storm
// of the README's story and shows the operator preventing it, end to end.
//
// It builds the control plane if it is not cached (hack/setup-envtest.sh),
// builds the manager and examples/gateway, starts kube-apiserver, etcd,
// kube-controller-manager and the manager, and runs the scenario three times on the same schedule —
// with the operator, with a static share for 8 pods, and with the naive
// full contract per pod — then prints a table and writes
// _output/storm/report.json and _output/storm/storm.png.
//
// Usage (from the repository's root; `make demo` does this):
//
//	go run ./test/e2e/cmd/storm [-time-scale 0.5] [-variants operator,naive]
//	go run ./test/e2e/cmd/storm -variants laggard -two-callers
//	go run ./test/e2e/cmd/storm -variants '' -partial-load
//
// The laggard variant and the two-callers scenario have schedules of their
// own and are reported apart (report-laggard.json, storm-laggard.png,
// report-two-callers.json, storm-two-callers.png); so is the partial-load
// scenario (report-partial-load.json): 80 % of what the usable permits
// serve, with a random balancer and with pinned connections, the
// operator's pods with a reserve beside one global gate and equal shares
// without a reserve fed the same calls, and the model's prediction; and
// the permit server killed mid-run.
//
// It exits 0 when the scenario ran, whether or not every goal was met (the
// table says so; `make e2e` asserts them), 1 when the harness could not run
// it, and 130 when interrupted. Ctrl-C stops every process it started.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/backpressure-dev/backpressure-operator/internal/testenv"
	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm"
	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm/report"
	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm/schedule"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx)
	interrupted := ctx.Err() != nil
	stop()
	switch {
	case err == nil:
	case interrupted:
		fmt.Fprintln(os.Stderr, "storm: interrupted; every process it started has been stopped")
		os.Exit(130)
	default:
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// options are the command line's.
type options struct {
	scale     float64
	variants  string
	callers   bool
	partial   bool
	out       string
	schedule  schedule.Schedule
	selection []storm.Variant
}

// parseOptions reads the command line, and $STORM_TIME_SCALE, and picks
// the variants to run.
func parseOptions() (*options, error) {
	o := &options{scale: 1}
	if v := os.Getenv(storm.TimeScaleEnv); v != "" {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return nil, fmt.Errorf("storm: %s=%q: %w", storm.TimeScaleEnv, v, err)
		}
		o.scale = f
	}
	flag.Float64Var(&o.scale, "time-scale", o.scale, "multiply the schedule's offsets by this factor (below 1 for a quicker run; also $"+storm.TimeScaleEnv+")")
	flag.StringVar(&o.variants, "variants", "operator,static,naive", "the variants to run, in order (operator, static, naive, laggard; empty for none)")
	flag.BoolVar(&o.callers, "two-callers", false, "also run the two-callers scenario: two workloads sharing one DownstreamContract")
	flag.BoolVar(&o.partial, "partial-load", false, "also run the partial-load scenario, with a random balancer, with pinned connections and with the permit server killed (about 7 minutes)")
	flag.StringVar(&o.out, "out", "", "output directory (default <repo>/_output/storm)")
	flag.Parse()

	o.schedule = storm.DefaultSchedule()
	if o.scale != 1 {
		o.schedule = o.schedule.Scaled(o.scale)
	}
	if err := o.schedule.Validate(); err != nil {
		return nil, err
	}
	all, err := storm.Variants(o.schedule)
	if err != nil {
		return nil, err
	}
	for _, name := range strings.Split(o.variants, ",") {
		if strings.TrimSpace(name) == "" {
			continue
		}
		i := slices.IndexFunc(all, func(v storm.Variant) bool { return v.Name == strings.TrimSpace(name) })
		if i < 0 {
			return nil, fmt.Errorf("storm: unknown variant %q (want operator, static, naive or laggard)", name)
		}
		o.selection = append(o.selection, all[i])
	}
	return o, nil
}

func run(ctx context.Context) error {
	o, err := parseOptions()
	if err != nil {
		return err
	}
	ctrllog.SetLogger(logr.Discard())
	logf := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "%s %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
	}
	began := time.Now()

	root, err := testenv.RepoRoot()
	if err != nil {
		return err
	}
	if err := controlPlane(ctx, root, logf); err != nil {
		return err
	}

	h, err := storm.Setup(ctx, storm.Options{Root: root, OutDir: o.out, Logf: logf})
	if err != nil {
		return err
	}
	defer h.Close()

	outputs, err := runVariants(ctx, h, o, logf)
	if err != nil {
		return err
	}
	var failed int
	if o.callers {
		n, err := runCallers(ctx, h)
		if err != nil {
			return err
		}
		failed += n
	}
	if o.partial {
		if err := runPartialLoad(ctx, h); err != nil {
			return err
		}
	}
	for _, out := range outputs {
		fmt.Println()
		if err := report.WriteTable(os.Stdout, out.report); err != nil {
			return err
		}
		fmt.Printf("\nReport: %s\nPlot:   %s\n", out.jsonPath, out.plot)
		failed += len(out.report.Failed())
	}
	fmt.Printf("Logs:   %s\n", filepath.Join(h.OutDir, "logs"))
	if failed > 0 {
		fmt.Printf("\n%d goal(s) not met; see the tables above.\n", failed)
	}
	fmt.Printf("Took %v.\n", time.Since(began).Round(time.Second))
	return nil
}

// output is a report and the files it is written to.
type output struct {
	report         *report.Report
	jsonPath, plot string
}

// runVariants runs the selected variants in turn. The variants of the
// common schedule share one report; a variant with its own schedule has a
// report of its own. Every report is written after each run, so that what
// has been measured is kept even if a later variant fails.
func runVariants(ctx context.Context, h *storm.Harness, o *options, logf func(string, ...any)) ([]*output, error) {
	var outputs []*output
	byName := map[string]*output{}
	outFor := func(v storm.Variant) *output {
		key, suffix := "", ""
		if v.Schedule != nil {
			key, suffix = v.Name, "-"+v.Name
		}
		if out, ok := byName[key]; ok {
			return out
		}
		out := &output{report: storm.NewReport(v.ScheduleOr(o.schedule)),
			jsonPath: filepath.Join(h.OutDir, "report"+suffix+".json"), plot: filepath.Join(h.OutDir, "storm"+suffix+".png")}
		byName[key] = out
		outputs = append(outputs, out)
		return out
	}
	for _, v := range o.selection {
		out := outFor(v)
		r, err := h.Run(ctx, v, v.ScheduleOr(o.schedule))
		if err != nil {
			return nil, fmt.Errorf("storm: variant %s: %w", v.Name, err)
		}
		out.report.Add(r)
		if err := out.report.WriteJSON(out.jsonPath); err != nil {
			return nil, err
		}
		if err := report.WritePlot(out.report, out.plot); err != nil {
			return nil, err
		}
		logf("[%s] Done: %d downstream 429s, peak in-flight %d, goodput %.1f/s", v.Name, r.Downstream429, r.PeakInFlight, r.GoodputPerSecond)
	}
	return outputs, nil
}

// runCallers runs the two-callers scenario, writes its report and plot and
// prints its table; it returns the number of goals not met.
func runCallers(ctx context.Context, h *storm.Harness) (int, error) {
	jsonPath, plot := filepath.Join(h.OutDir, "report-two-callers.json"), filepath.Join(h.OutDir, "storm-two-callers.png")
	cr, err := h.RunCallers(ctx, storm.TwoCallers())
	if err != nil {
		return 0, fmt.Errorf("storm: two callers: %w", err)
	}
	if err := cr.WriteJSON(jsonPath); err != nil {
		return 0, err
	}
	if err := report.WriteCallersPlot(cr, plot); err != nil {
		return 0, err
	}
	fmt.Println()
	if err := report.WriteCallersTable(os.Stdout, cr); err != nil {
		return 0, err
	}
	fmt.Printf("\nReport: %s\nPlot:   %s\n", jsonPath, plot)
	return len(cr.Failed()), nil
}

// runPartialLoad runs the partial-load scenario with both balancers and
// with the permit server killed, writes its report after each run and
// prints its table.
func runPartialLoad(ctx context.Context, h *storm.Harness) error {
	jsonPath := filepath.Join(h.OutDir, "report-partial-load.json")
	r := &storm.PartialLoadReport{}
	for _, b := range []string{storm.PartialRandom, storm.PartialPinned} {
		run, err := h.RunPartialLoad(ctx, b)
		if err != nil {
			return fmt.Errorf("storm: partial load, %s: %w", b, err)
		}
		if b == storm.PartialRandom {
			r.Random = run
		} else {
			r.Pinned = run
		}
		if err := r.WriteJSON(jsonPath); err != nil {
			return err
		}
	}
	k, err := h.RunPartialLoadBrokerKilled(ctx)
	if err != nil {
		return fmt.Errorf("storm: partial load, permit server killed: %w", err)
	}
	r.BrokerKilled = k
	if err := r.WriteJSON(jsonPath); err != nil {
		return err
	}
	fmt.Println()
	if err := storm.WritePartialLoadTable(os.Stdout, r); err != nil {
		return err
	}
	fmt.Printf("\nReport: %s\n", jsonPath)
	return nil
}

// controlPlane makes sure kube-apiserver, kube-controller-manager, etcd and
// kubectl are built, as hack/setup-envtest.sh does on a fresh machine, and
// points KUBEBUILDER_ASSETS at them.
func controlPlane(ctx context.Context, root string, logf func(string, ...any)) error {
	if dir := os.Getenv(testenv.AssetsEnv); dir != "" {
		return nil
	}
	logf("Making sure the control plane is built (hack/setup-envtest.sh; about 20 minutes the first time on 2 cores)")
	cmd := exec.CommandContext(ctx, filepath.Join(root, "hack", "setup-envtest.sh"))
	cmd.Dir = root
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("storm: hack/setup-envtest.sh: %w", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return os.Setenv(testenv.AssetsEnv, lines[len(lines)-1])
}
