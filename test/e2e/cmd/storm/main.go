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
//
// The laggard variant and the two-callers scenario have schedules of their
// own and are reported apart (report-laggard.json, storm-laggard.png,
// report-two-callers.json, storm-two-callers.png).
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

func run(ctx context.Context) error {
	scale := 1.0
	if v := os.Getenv(storm.TimeScaleEnv); v != "" {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return fmt.Errorf("storm: %s=%q: %w", storm.TimeScaleEnv, v, err)
		}
		scale = f
	}
	flag.Float64Var(&scale, "time-scale", scale, "multiply the schedule's offsets by this factor (below 1 for a quicker run; also $"+storm.TimeScaleEnv+")")
	only := flag.String("variants", "operator,static,naive", "the variants to run, in order (operator, static, naive, laggard; empty for none)")
	callers := flag.Bool("two-callers", false, "also run the two-callers scenario: two workloads sharing one DownstreamContract")
	out := flag.String("out", "", "output directory (default <repo>/_output/storm)")
	flag.Parse()

	ctrllog.SetLogger(logr.Discard())
	logf := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "%s %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
	}
	began := time.Now()

	s := storm.DefaultSchedule()
	if scale != 1 {
		s = s.Scaled(scale)
	}
	if err := s.Validate(); err != nil {
		return err
	}
	all, err := storm.Variants(s)
	if err != nil {
		return err
	}
	var variants []storm.Variant
	for _, name := range strings.Split(*only, ",") {
		if strings.TrimSpace(name) == "" {
			continue
		}
		i := slices.IndexFunc(all, func(v storm.Variant) bool { return v.Name == strings.TrimSpace(name) })
		if i < 0 {
			return fmt.Errorf("storm: unknown variant %q (want operator, static, naive or laggard)", name)
		}
		variants = append(variants, all[i])
	}

	root, err := testenv.RepoRoot()
	if err != nil {
		return err
	}
	if err := controlPlane(ctx, root, logf); err != nil {
		return err
	}

	h, err := storm.Setup(ctx, storm.Options{Root: root, OutDir: *out, Logf: logf})
	if err != nil {
		return err
	}
	defer h.Close()

	// The variants of the common schedule share one report; a variant with
	// its own schedule has a report of its own.
	type output struct {
		report         *report.Report
		jsonPath, plot string
	}
	var outputs []*output
	byName := map[string]*output{}
	outFor := func(v storm.Variant) *output {
		key, suffix := "", ""
		if v.Schedule != nil {
			key, suffix = v.Name, "-"+v.Name
		}
		if o, ok := byName[key]; ok {
			return o
		}
		o := &output{report: storm.NewReport(v.ScheduleOr(s)),
			jsonPath: filepath.Join(h.OutDir, "report"+suffix+".json"), plot: filepath.Join(h.OutDir, "storm"+suffix+".png")}
		byName[key] = o
		outputs = append(outputs, o)
		return o
	}
	var failed int
	for _, v := range variants {
		o := outFor(v)
		r, err := h.Run(ctx, v, v.ScheduleOr(s))
		if err != nil {
			return fmt.Errorf("storm: variant %s: %w", v.Name, err)
		}
		o.report.Add(r)
		// Keep what has been measured even if a later variant fails.
		if err := o.report.WriteJSON(o.jsonPath); err != nil {
			return err
		}
		if err := report.WritePlot(o.report, o.plot); err != nil {
			return err
		}
		logf("[%s] Done: %d downstream 429s, peak in-flight %d, goodput %.1f/s", v.Name, r.Downstream429, r.PeakInFlight, r.GoodputPerSecond)
	}
	if *callers {
		o := &output{jsonPath: filepath.Join(h.OutDir, "report-two-callers.json"), plot: filepath.Join(h.OutDir, "storm-two-callers.png")}
		cr, err := h.RunCallers(ctx, storm.TwoCallers())
		if err != nil {
			return fmt.Errorf("storm: two callers: %w", err)
		}
		if err := cr.WriteJSON(o.jsonPath); err != nil {
			return err
		}
		if err := report.WriteCallersPlot(cr, o.plot); err != nil {
			return err
		}
		fmt.Println()
		if err := report.WriteCallersTable(os.Stdout, cr); err != nil {
			return err
		}
		fmt.Printf("\nReport: %s\nPlot:   %s\n", o.jsonPath, o.plot)
		failed += len(cr.Failed())
	}

	for _, o := range outputs {
		fmt.Println()
		if err := report.WriteTable(os.Stdout, o.report); err != nil {
			return err
		}
		fmt.Printf("\nReport: %s\nPlot:   %s\n", o.jsonPath, o.plot)
		failed += len(o.report.Failed())
	}
	fmt.Printf("Logs:   %s\n", filepath.Join(h.OutDir, "logs"))
	if failed > 0 {
		fmt.Printf("\n%d goal(s) not met; see the tables above.\n", failed)
	}
	fmt.Printf("Took %v.\n", time.Since(began).Round(time.Second))
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
