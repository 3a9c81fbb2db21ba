package sourceflags_test

import (
	"errors"
	"flag"
	"io"
	"testing"

	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/internal/sharetest"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/sourceflags"
)

func parse(t *testing.T, env map[string]string, args ...string) sourceflags.Flags {
	t.Helper()
	var f sourceflags.Flags
	fs := flag.NewFlagSet("app", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	f.Register(fs, func(k string) string { return env[k] })
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return f
}

// --namespace defaults to the pod's own, from the downward API.
func TestNamespaceDefaultsToThePods(t *testing.T) {
	f := parse(t, map[string]string{"POD_NAMESPACE": "shop"}, "--configmap", "search-gateway-backpressure", "--acknowledge")
	if f.Namespace != "shop" || f.ConfigMap != "search-gateway-backpressure" || !f.Acknowledge {
		t.Errorf("flags %+v", f)
	}
	if errs := f.Check(); len(errs) != 0 {
		t.Errorf("Check: %v", errs)
	}
}

func TestCheckNamesTheMistake(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{nil, "exactly one of --configmap and --plan-dir is required"},
		{[]string{"--configmap", "c", "--plan-dir", "/d"}, "exactly one of --configmap and --plan-dir is required"},
		{[]string{"--configmap", "c"}, "--configmap needs --namespace or $POD_NAMESPACE"},
	} {
		f := parse(t, nil, tt.args...)
		if got := errors.Join(f.Check()...); got == nil || got.Error() != tt.want {
			t.Errorf("Check of %q = %v, want %q", tt.args, got, tt.want)
		}
	}
}

// A directory needs no API server unless the pod acknowledges: the source
// Open returns reads the plans there.
func TestOpenADirectoryWithoutTheAPI(t *testing.T) {
	dir := t.TempDir()
	sharetest.WritePlan(t, dir, sharetest.Doc("logistics-api", 3))
	f := parse(t, nil, "--plan-dir", dir)
	src, ack, err := f.Open("test")
	if err != nil || ack != nil {
		t.Fatalf("Open = %v, %v; want no acknowledgement and no error", ack, err)
	}
	rt, err := backpressure.New(t.Context(), src, backpressure.Options{Gates: []string{"logistics-api"}})
	if err != nil {
		t.Fatal(err)
	}
	if s := sharetest.MustShare(t, rt, "logistics-api"); s.Limits.Permits != 3 {
		t.Errorf("permits %d, want the 3 the directory holds", s.Limits.Permits)
	}
}
