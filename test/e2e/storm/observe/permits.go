package observe

import (
	"bufio"
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// PermitsCheck compares, for the pods running at the end of a run, the
// permits the harness counted from their "Applied plan" log lines with the
// backpressure_gate_permits metric their gates export: the capacity figures
// are only as good as that agreement.
type PermitsCheck struct {
	// Pods is the number of pods scraped; Agree of them agreed.
	Pods  int `json:"pods"`
	Agree int `json:"agree"`
	// Disagreements name the others: pod, logged and exported permits, or
	// the scrape's error.
	Disagreements []string `json:"disagreements,omitempty"`
}

// checkPermits scrapes every pod of addrs (pod → metrics address) and
// compares its gate's permits with logged (pod → permits).
func checkPermits(ctx context.Context, gate string, addrs map[string]string, logged func(pod string) int) *PermitsCheck {
	c := &PermitsCheck{}
	cl := &http.Client{Timeout: 5 * time.Second}
	for _, pod := range slices.Sorted(maps.Keys(addrs)) {
		c.Pods++
		got, err := scrapePermits(ctx, cl, "http://"+addrs[pod]+"/metrics", gate)
		switch want := logged(pod); {
		case err != nil:
			c.Disagreements = append(c.Disagreements, fmt.Sprintf("%s: %v", pod, err))
		case got != want:
			c.Disagreements = append(c.Disagreements, fmt.Sprintf("%s: logged %d, exported %d", pod, want, got))
		default:
			c.Agree++
		}
	}
	return c
}

// scrapePermits reads backpressure_gate_permits{gate="<gate>"} from a
// Prometheus text exposition at url.
func scrapePermits(ctx context.Context, cl *http.Client, url, gate string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := cl.Do(req)
	if err != nil {
		return 0, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	prefix := fmt.Sprintf("backpressure_gate_permits{gate=%q} ", gate)
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), prefix); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				return 0, fmt.Errorf("%s: %q: %w", url, v, err)
			}
			return int(f), nil
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("%s: no backpressure_gate_permits for gate %q", url, gate)
}
