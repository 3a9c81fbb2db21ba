package report

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"

	"github.com/backpressure-dev/backpressure-operator/internal/testenv"
)

// WritePlot draws the report as a PNG at path: for every variant, the
// downstream's in-flight calls against the contract and its 429s and
// successes per second; below, the HPA's decisions in the first variant's
// run and the downstream's latency (hack/stormplot says more).
//
// The drawing is done by hack/stormplot, a module of its own, so that its
// plotting library stays out of the module graph of every application that
// requires this module. WritePlot runs it with `go run`, which needs the go
// command and the repository, as the harness's build of the manager does.
func WritePlot(r *Report, path string) error {
	if len(r.Order) == 0 {
		return errors.New("storm: nothing to plot")
	}
	return plot(r, path)
}

// WriteCallersPlot draws the two-callers scenario as a PNG at path, with
// hack/stormplot as WritePlot does.
func WriteCallersPlot(r *CallersReport, path string) error {
	if len(r.Timeline) == 0 {
		return errors.New("storm: nothing to plot")
	}
	return plot(r, path)
}

// plot hands report to hack/stormplot on its standard input.
func plot(report any, path string) error {
	root, err := testenv.RepoRoot()
	if err != nil {
		return err
	}
	out, err := filepath.Abs(path)
	if err != nil {
		return err
	}
	data, err := json.Marshal(report)
	if err != nil {
		return err
	}
	cmd := exec.Command("go", "run", ".", "-o", out)
	cmd.Dir = filepath.Join(root, "hack", "stormplot")
	cmd.Stdin = bytes.NewReader(data)
	var output bytes.Buffer
	cmd.Stdout, cmd.Stderr = &output, &output
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("storm: drawing %s with hack/stormplot: %w: %s", path, err, bytes.TrimSpace(output.Bytes()))
	}
	return nil
}
