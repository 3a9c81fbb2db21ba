package observe

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestCheckPermits(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprintln(w, "# HELP backpressure_gate_permits Permits (in-flight limit) of the gate in force.")
		fmt.Fprintln(w, `backpressure_gate_permits{gate="other"} 9`)
		fmt.Fprintln(w, `backpressure_gate_permits{gate="g"} 5`)
	}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	logged := map[string]int{"a": 5, "b": 4}
	c := checkPermits(context.Background(), "g", map[string]string{"a": addr, "b": addr, "c": "127.0.0.1:1"}, func(p string) int { return logged[p] })
	if c.Pods != 3 || c.Agree != 1 || len(c.Disagreements) != 2 || !strings.Contains(c.Disagreements[0], "b: logged 4, exported 5") {
		t.Errorf("checkPermits = %+v", c)
	}
}
