//go:build unix

package storm

import (
	"os"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"

	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm/cluster"
	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm/observe"
)

// podProgram returns the program a pod of v runs.
func (h *Harness) podProgram(v Variant) string {
	if v.Sidecar {
		return h.proxyPod
	}
	return h.gateway
}

// podRunner returns what the kubelet of a caller's workload runs as a pod's
// container: the caller's program, with examples/gateway's command line,
// calling the stage's downstream, reading its plan from the operator's
// ConfigMap (and acknowledging it) or from the plan directory, serving its
// metrics, the first pod started running the laggard's program, which applies
// every plan late, when the caller has a laggard. What its log says is observed.
func (h *Harness) podRunner(sc Scenario, st *Stage, cs *CallerStage, logDir string) cluster.PodRunner {
	return func(pod *corev1.Pod, onLog func(cluster.LogLine)) (*cluster.Process, error) {
		args := []string{"--listen", "127.0.0.1:0", "--downstream", st.Downstream.URL(), "--gate", cs.Gate}
		program := cs.Program
		if cs.Laggard > 0 && cs.laggard.claim(pod.Name) {
			program = h.laggardPod
			args = append(args, "--apply-delay", cs.Laggard.String())
			h.logf("[%s] Pod %s applies every new plan %v late", sc.Name, pod.Name, cs.Laggard)
		}
		// Every pod serves its metrics: the HPA scales on them.
		args = append(args, "--metrics-listen", "127.0.0.1:0")
		if cs.ConfigMap != "" {
			args = append(args, "--configmap", cs.ConfigMap, "--namespace", cs.Namespace,
				"--kubeconfig", h.Kubeconfig, "--acknowledge")
		} else {
			args = append(args, "--plan-dir", h.planDir(sc, cs.Caller))
		}
		args = append(args, GatewayRetryArgs...)
		return h.startObservedPod(cs.Observations, pod, program, args, logDir, onLog)
	}
}

// startObservedPod starts a pod's process, whose log obs reads (the plans
// it applies, its /metrics address) before onLog does, and whose exit obs
// records.
func (h *Harness) startObservedPod(obs *observe.Observations, pod *corev1.Pod, program string, args []string, logDir string, onLog func(cluster.LogLine)) (*cluster.Process, error) {
	proc, err := h.StartProcess(cluster.ProcessSpec{
		Name:    pod.Namespace + "/" + pod.Name,
		Path:    program,
		Args:    args,
		Env:     []string{"POD_NAME=" + pod.Name, "POD_NAMESPACE=" + pod.Namespace},
		LogPath: podLogPath(logDir, pod),
		OnLog: func(l cluster.LogLine) {
			switch l.Msg {
			case cluster.MsgAppliedPlan:
				obs.Applied(pod.Name, l)
			case cluster.MsgServingMetrics:
				obs.ServingMetrics(pod.Name, l.Address)
			}
			onLog(l)
		},
	})
	if err != nil {
		return nil, err
	}
	go func() {
		<-proc.Done()
		obs.Exited(pod.Name)
	}()
	return proc, nil
}

// podLogPath returns the file in dir for the log of pod's process:
// <pod>.log, or <pod>.<uid>.log when a pod of the same name (a StatefulSet's
// pod created again) already wrote that.
func podLogPath(dir string, pod *corev1.Pod) string {
	path := filepath.Join(dir, pod.Name+".log")
	if _, err := os.Stat(path); err == nil {
		return filepath.Join(dir, pod.Name+"."+string(pod.UID)+".log")
	}
	return path
}
