package plan

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// divisionPods returns n pods as the operator divides a total over them:
// every pod the same share but for some with one permit more, named as a
// Deployment's pods are, <deployment>-<replica set hash>-<5 characters>
// (37 characters here).
func divisionPods(n int) map[string]PodShare {
	pods := make(map[string]PodShare, n)
	for i := range n {
		permits := 3 + i%2
		pods[fmt.Sprintf("search-gateway-7d9f8c6b5d-%05x", i)] = PodShare{Permits: permits, QueueCapacity: permits, Workers: permits, RetryBudgetPerSecond: 0.25}
	}
	return pods
}

func TestCompactRoundTrip(t *testing.T) {
	d := sampleDoc()
	d.Version, d.Pods = CompactVersion, divisionPods(1000)
	d.Pods["odd-one"] = PodShare{Permits: 9, Workers: 2}
	d.Hash = Hash(d)
	data, err := Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	back, err := Parse(data)
	if err != nil {
		t.Fatalf("Parse(Marshal(d)): %v", err)
	}
	if !Equal(back, d) {
		t.Fatalf("round trip changed the document")
	}
	if back.For("odd-one").Permits != 9 || back.For("search-gateway-7d9f8c6b5d-00001").Permits != 4 || back.For("not-named").Permits != d.Permits {
		t.Errorf("shares after the round trip: %+v", back.For("odd-one"))
	}
	if !strings.Contains(string(data), `"shares":[{"permits":9,`) || strings.Contains(string(data), `"pods":{`) {
		t.Errorf("version 3 encoding: %.300s", data)
	}
	// The same content in version 2 is another document (its hash covers
	// the version), with the same shares.
	v2 := d
	v2.Version = CurrentVersion
	if Hash(v2) == d.Hash || v2.For("odd-one").Share() != d.For("odd-one").Share() {
		t.Errorf("version 2 and 3 of one content: hashes %s %s", Hash(v2), d.Hash)
	}
}

func TestCompactRejects(t *testing.T) {
	head := `{"version":3,"gate":"g","epoch":"e","revision":1,"permits":0,"ratePerSecond":0,"burst":0,"queueCapacity":0,` +
		`"maxQueueWaitSeconds":0,"acquireTimeoutSeconds":0,"latencySeconds":0,"deadlineSeconds":0,"workers":0,"retryBudgetPerSecond":0`
	share := `"permits":1,"ratePerSecond":0,"burst":0,"queueCapacity":0,"workers":1,"retryBudgetPerSecond":0`
	for _, c := range []struct {
		name, doc, field string
	}{
		{"pods of version 2", head + `,"pods":{"a":{` + share + `}}}`, "pods"},
		{"a pod in two shares", head + `,"shares":[{` + share + `,"pods":["a"]},{` + strings.Replace(share, `"permits":1`, `"permits":2`, 1) + `,"pods":["a"]}]}`, "shares[1].pods"},
		{"a share without pods", head + `,"shares":[{` + share + `}]}`, "shares[0].pods"},
		{"a share without permits", head + `,"shares":[{"ratePerSecond":0,"burst":0,"queueCapacity":0,"workers":0,"retryBudgetPerSecond":0,"pods":["a"]}]}`, "shares[0].permits"},
		{"a null share", head + `,"shares":[null]}`, "shares[0]"},
		{"a pod name that is not one", head + `,"shares":[{` + share + `,"pods":["A_b"]}]}`, `pods["A_b"]`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse([]byte(c.doc))
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Field != c.field {
				t.Errorf("Parse: %v, want an error naming %s", err, c.field)
			}
		})
	}
	// Version 2 does not know shares, and ignores it as any unknown field.
	v2 := strings.Replace(head, `"version":3`, `"version":2`, 1) + `,"shares":"anything"}`
	if _, err := Parse([]byte(v2)); err != nil {
		t.Errorf("version 2 with a field it does not know: %v", err)
	}
}

// maxFitting returns the most pods of divisionPods whose document, in
// version, fits in bytes.
func maxFitting(t *testing.T, version, bytes int) int {
	t.Helper()
	lo, hi := 0, MaxPods
	for lo < hi {
		mid := (lo + hi + 1) / 2
		d := sampleDoc()
		d.Version, d.Pods = version, divisionPods(mid)
		d.Hash = Hash(d)
		data, err := Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		if len(data) <= bytes {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo
}

// TestCompactRaisesThePodLimit measures how many pods, named as a
// Deployment's are, one document can divide within the ConfigMap's 1 MiB of
// data (less the key): version 3 names each pod once, without its share.
func TestCompactRaisesThePodLimit(t *testing.T) {
	room := 1<<20 - len(KeyFor("logistics-api"))
	v2, v3 := maxFitting(t, CurrentVersion, room), maxFitting(t, CompactVersion, room)
	t.Logf("pods of 37-character names per document within %d bytes: version 2 %d, version 3 %d", room, v2, v3)
	if v2 < 5000 || v2 > 9000 {
		t.Errorf("version 2 fits %d pods, want the 6,000 to 9,000 measured before version 3", v2)
	}
	if v3 < 25000 {
		t.Errorf("version 3 fits %d pods, want at least 25,000", v3)
	}
}

// TestHolding round-trips what pods may still hold, in both versions, and
// rejects a holding that is not a pod's, or out of range.
func TestHolding(t *testing.T) {
	for _, v := range []int{CurrentVersion, CompactVersion} {
		d := sampleDoc()
		d.Version, d.Holding = v, map[string]int{"api-0": 7, "api-1": 0}
		d.Hash = Hash(d)
		data, err := Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		back, err := Parse(data)
		if err != nil || !Equal(back, d) {
			t.Fatalf("version %d: round trip of holding: %v, %+v", v, err, back.Holding)
		}
		if back.For("api-0").Holding != nil {
			t.Errorf("a pod's view carries the holding")
		}
	}
	d := sampleDoc()
	d.Holding = map[string]int{"Not_A_Pod": 1, "api-0": -1}
	var fe *FieldError
	if err := Validate(d); !errors.As(err, &fe) || !strings.Contains(err.Error(), `holding["Not_A_Pod"]`) || !strings.Contains(err.Error(), `holding["api-0"]: must be in [0, 1048575], got -1`) {
		t.Errorf("Validate: %v", err)
	}
}
