//go:build unix

package cluster

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/backpressure-dev/backpressure-operator/internal/testenv"
)

// NodeName is the node the harness's kubelet runs every pod on.
const NodeName = "storm-node"

// Controllers are the kube-controller-manager controllers the storm runs:
// the HPA controller decides the replica count from the custom metrics API
// (see MetricsAPI), the Deployment and ReplicaSet controllers, or the
// StatefulSet controller, create and delete the pods, the garbage collector
// removes what a deleted owner leaves, and the EndpointSlice controller
// writes the Service's slices.
var Controllers = []string{
	"horizontal-pod-autoscaler-controller",
	"deployment-controller",
	"replicaset-controller",
	"statefulset-controller",
	"garbage-collector-controller",
	"endpointslice-controller",
}

// HPASyncPeriod is how often the HPA controller evaluates every HPA: 15s
// by default, 2s here so that a 70-second storm sees its decisions.
const HPASyncPeriod = 2 * time.Second

// ControllerManagerArgs are kube-controller-manager's flags in the storm:
// its own kubeconfig, the controllers above, no leader election (it is the
// only one) and no secure port (nothing scrapes it, and it would need a free
// port). Every controller uses the controller manager's own credentials, so
// no service-account tokens are needed.
func ControllerManagerArgs(kubeconfig string) []string {
	return []string{
		"--kubeconfig", kubeconfig,
		"--controllers", strings.Join(Controllers, ","),
		"--leader-elect=false",
		"--secure-port=0",
		"--use-service-account-credentials=false",
		"--horizontal-pod-autoscaler-sync-period=" + HPASyncPeriod.String(),
		// The storm's Deployments and ReplicaSets are small; a few workers
		// each are what a real cluster runs too.
		"--concurrent-deployment-syncs=5",
		"--concurrent-replicaset-syncs=5",
		"--concurrent-statefulset-syncs=5",
		"-v=2",
	}
}

// StartControllerManager starts kube-controller-manager, built beside the
// API server by hack/setup-envtest.sh, against the started env, as a user
// in system:masters; its log goes to dir. The kubelet registers the Node
// it runs pods on (see NewWorkload).
func StartControllerManager(env *envtest.Environment, procs *Processes, dir string) (*Process, error) {
	assets, err := testenv.Assets()
	if err != nil {
		return nil, err
	}
	bin := filepath.Join(assets, "kube-controller-manager")
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("storm: kube-controller-manager is not built in %s (run hack/setup-envtest.sh): %w", assets, err)
	}
	user, err := env.AddUser(envtest.User{Name: "system:kube-controller-manager", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return nil, fmt.Errorf("storm: controller manager user: %w", err)
	}
	kc, err := user.KubeConfig()
	if err != nil {
		return nil, err
	}
	kubeconfig := filepath.Join(dir, "kube-controller-manager.kubeconfig")
	if err := os.WriteFile(kubeconfig, kc, 0o600); err != nil {
		return nil, err
	}
	return procs.Start(ProcessSpec{
		Name:    "kube-controller-manager",
		Path:    bin,
		Args:    ControllerManagerArgs(kubeconfig),
		LogPath: filepath.Join(dir, "kube-controller-manager.log"),
	})
}
