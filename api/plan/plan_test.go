package plan

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// sample is the document of the version 2 contract, with a hash.
const sample = `{"version": 2, "gate": "logistics-api", "downstream": "logistics.example.com",
 "hash": "abc123", "generation": 3,
 "epoch": "0f1e-uid", "revision": 17,
 "permits": 5, "ratePerSecond": 0, "burst": 0,
 "queueCapacity": 9, "maxQueueWaitSeconds": 0.1, "acquireTimeoutSeconds": 0.1,
 "latencySeconds": 0.22, "deadlineSeconds": 2, "workers": 5,
 "retryBudgetPerSecond": 1.25,
 "pods": {"search-gateway-7d9f-abcde": {"permits": 6, "ratePerSecond": 0, "burst": 0,
                                        "queueCapacity": 10, "workers": 6, "retryBudgetPerSecond": 1.5},
          "search-gateway-7d9f-zzzzz": {"permits": 0, "ratePerSecond": 0, "burst": 0,
                                        "queueCapacity": 0, "workers": 0, "retryBudgetPerSecond": 0}}}`

// The pods the sample names.
const (
	podA = "search-gateway-7d9f-abcde"
	podZ = "search-gateway-7d9f-zzzzz"
)

func sampleDoc() Document {
	return Document{
		Version: 2, Gate: "logistics-api", Downstream: "logistics.example.com",
		Hash: "abc123", Generation: 3, Epoch: "0f1e-uid", Revision: 17,
		Permits: 5, QueueCapacity: 9, MaxQueueWaitSeconds: 0.1, AcquireTimeoutSeconds: 0.1,
		LatencySeconds: 0.22, DeadlineSeconds: 2, Workers: 5, RetryBudgetPerSecond: 1.25,
		Pods: map[string]PodShare{
			podA: {Permits: 6, QueueCapacity: 10, Workers: 6, RetryBudgetPerSecond: 1.5},
			podZ: {},
		},
	}
}

// withoutPods is sample without its pods field.
func withoutPods(t *testing.T) string {
	t.Helper()
	i := strings.Index(sample, `,
 "pods":`)
	if i < 0 {
		t.Fatal("sample has no pods")
	}
	return sample[:i] + "}"
}

// edit returns sample with old replaced by new, failing if old is absent.
func edit(t *testing.T, old, new string) string {
	t.Helper()
	if !strings.Contains(sample, old) {
		t.Fatalf("sample has no %q", old)
	}
	return strings.Replace(sample, old, new, 1)
}

func TestParse(t *testing.T) {
	withRate := sampleDoc()
	withRate.RatePerSecond, withRate.Burst = 2.5, 3
	unhashed := sampleDoc()
	unhashed.Hash = Hash(unhashed)
	negZero := sampleDoc()
	negZero.LatencySeconds = 0
	noPods := sampleDoc()
	noPods.Pods = nil
	podRate := sampleDoc()
	podRate.Pods = map[string]PodShare{podA: {Permits: 6, RatePerSecond: 3, Burst: 2, QueueCapacity: 10, Workers: 6, RetryBudgetPerSecond: 1.5}, podZ: {}}

	tests := []struct {
		name string
		in   string
		want Document
	}{
		{"design sample", sample, sampleDoc()},
		{"rate with burst", edit(t, `"ratePerSecond": 0, "burst": 0`, `"ratePerSecond": 2.5, "burst": 3`), withRate},
		{"unknown fields are ignored", edit(t, `"workers": 5,`, `"workers": 5, "priority": "high", "extra": {"a": [1]},`), sampleDoc()},
		{"empty hash is filled", edit(t, `"hash": "abc123",`, `"hash": "",`), unhashed},
		{"missing hash is filled", edit(t, `"hash": "abc123",`, ``), unhashed},
		{"negative zero reads as zero", edit(t, `"latencySeconds": 0.22`, `"latencySeconds": -0`), negZero},
		{"negative zero in a pod's share reads as zero", edit(t, `"retryBudgetPerSecond": 0}}}`, `"retryBudgetPerSecond": -0}}}`), sampleDoc()},
		{"no pods", withoutPods(t), noPods},
		{"empty pods", strings.Replace(withoutPods(t), `}`, `, "pods": {}}`, 1), noPods},
		{"null pods", strings.TrimSuffix(withoutPods(t), "}") + `, "pods": null}`, noPods},
		{"a pod's rate with burst", edit(t, `{"permits": 6, "ratePerSecond": 0, "burst": 0`, `{"permits": 6, "ratePerSecond": 3, "burst": 2`), podRate},
		{"unknown fields of a pod's entry are ignored", edit(t, `"workers": 6,`, `"workers": 6, "zone": "b",`), sampleDoc()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse([]byte(tt.in))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Parse (-want +got):\n%s", diff)
			}
			if math.Signbit(got.LatencySeconds) || math.Signbit(got.Pods[podZ].RetryBudgetPerSecond) {
				t.Errorf("a field kept its negative sign")
			}
		})
	}
}

func TestParseRejects(t *testing.T) {
	tests := []struct {
		name      string
		in        string
		wantField string // "" when the error is not a *FieldError
		wantIn    string // a fragment of the message
	}{
		{"not JSON", `{"version": 2,`, "", "malformed"},
		{"not an object", `[1, 2]`, "", "malformed"},
		{"trailing data", sample + ` {}`, "", "malformed"},
		{"null document", `null`, "version", "required"},
		{"duplicate field", edit(t, `"permits": 5,`, `"permits": 5, "permits": 500,`), "", "duplicate"},
		{"missing version", edit(t, `"version": 2,`, ``), "version", "required"},
		{"version 1", edit(t, `"version": 2`, `"version": 1`), "version", "unsupported version 1; this reader understands versions 2 and 3"},
		{"version 4", edit(t, `"version": 2`, `"version": 4`), "version", "unsupported version 4"},
		{"version zero", edit(t, `"version": 2`, `"version": 0`), "version", "unsupported version 0"},
		{"fractional version", edit(t, `"version": 2`, `"version": 1.5`), "", "malformed"},
		{"missing epoch", edit(t, `"epoch": "0f1e-uid",`, ``), "epoch", "required"},
		{"missing revision", edit(t, `"revision": 17,`, ``), "revision", "required"},
		{"empty epoch", edit(t, `"epoch": "0f1e-uid"`, `"epoch": ""`), "epoch", "1 to 64 characters"},
		{"epoch with a slash", edit(t, `"epoch": "0f1e-uid"`, `"epoch": "a/b"`), "epoch", "[A-Za-z0-9-]"},
		{"long epoch", edit(t, `"epoch": "0f1e-uid"`, `"epoch": "`+strings.Repeat("e", 65)+`"`), "epoch", "got 65 characters"},
		{"revision zero", edit(t, `"revision": 17`, `"revision": 0`), "revision", "at least 1, got 0"},
		{"negative revision", edit(t, `"revision": 17`, `"revision": -17`), "revision", "at least 1, got -17"},
		{"fractional revision", edit(t, `"revision": 17`, `"revision": 17.5`), "", "malformed"},
		{"pods not an object", strings.TrimSuffix(withoutPods(t), "}") + `, "pods": [1]}`, "", "malformed"},
		{"a pod's missing workers", edit(t, `"workers": 6,`, ``), `pods["search-gateway-7d9f-abcde"].workers`, "required"},
		{"a pod's null permits", edit(t, `{"permits": 6`, `{"permits": null`), `pods["search-gateway-7d9f-abcde"].permits`, "required"},
		{"a null pod entry", edit(t, `"search-gateway-7d9f-zzzzz": {"permits": 0, "ratePerSecond": 0, "burst": 0,
                                        "queueCapacity": 0, "workers": 0, "retryBudgetPerSecond": 0}`, `"search-gateway-7d9f-zzzzz": null`),
			`pods["search-gateway-7d9f-zzzzz"]`, "got null"},
		{"a pod's burst without rate", edit(t, `{"permits": 6, "ratePerSecond": 0, "burst": 0`, `{"permits": 6, "ratePerSecond": 0, "burst": 1`),
			`pods["search-gateway-7d9f-abcde"].burst`, "must be 0 when ratePerSecond is 0"},
		{"a pod's rate without burst", edit(t, `{"permits": 6, "ratePerSecond": 0`, `{"permits": 6, "ratePerSecond": 4`),
			`pods["search-gateway-7d9f-abcde"].burst`, "at least 1 when ratePerSecond is set"},
		{"a pod's negative permits", edit(t, `{"permits": 6`, `{"permits": -6`), `pods["search-gateway-7d9f-abcde"].permits`, "got -6"},
		{"a pod's budget over its bound", edit(t, `"retryBudgetPerSecond": 1.5`, `"retryBudgetPerSecond": 1e20`),
			`pods["search-gateway-7d9f-abcde"].retryBudgetPerSecond`, "[0, 1000000000]"},
		{"a pod's fractional workers", edit(t, `"workers": 6`, `"workers": 6.5`), "", "malformed"},
		{"a key that is not a pod name", edit(t, `"search-gateway-7d9f-abcde"`, `"Search_Gateway"`), `pods["Search_Gateway"]`, "key must be a pod name"},
		{"an empty pod name", edit(t, `"search-gateway-7d9f-abcde"`, `""`), `pods[""]`, "must not be empty"},
		{"a pod named twice", edit(t, `"search-gateway-7d9f-zzzzz"`, `"search-gateway-7d9f-abcde"`), "", "duplicate"},
		{"missing permits", edit(t, `"permits": 5,`, ``), "permits", "required"},
		{"null permits", edit(t, `"permits": 5`, `"permits": null`), "permits", "required"},
		{"names are case-sensitive", edit(t, `"permits": 5`, `"Permits": 5`), "permits", "required"},
		{"missing gate", edit(t, `"gate": "logistics-api",`, ``), "gate", "required"},
		{"fractional permits", edit(t, `"permits": 5`, `"permits": 5.5`), "", "malformed"},
		{"integer as string", edit(t, `"permits": 5`, `"permits": "5"`), "", "malformed"},
		{"negative permits", edit(t, `"permits": 5`, `"permits": -1`), "permits", "[0, 1048575], got -1"},
		{"permits beyond int32", edit(t, `"permits": 5`, `"permits": 2147483648`), "permits", "[0, 1048575]"},
		{"negative rate", edit(t, `"ratePerSecond": 0`, `"ratePerSecond": -0.5`), "ratePerSecond", "[0, 1000000000]"},
		{"rate without burst", edit(t, `"ratePerSecond": 0`, `"ratePerSecond": 10`), "burst", "at least 1 when ratePerSecond is set"},
		{"burst without rate", edit(t, `"burst": 0`, `"burst": 4`), "burst", "must be 0 when ratePerSecond is 0"},
		{"negative wait", edit(t, `"maxQueueWaitSeconds": 0.1`, `"maxQueueWaitSeconds": -0.1`), "maxQueueWaitSeconds", "seconds in [0, 3600]"},
		{"huge deadline", edit(t, `"deadlineSeconds": 2`, `"deadlineSeconds": 1e300`), "deadlineSeconds", "seconds in [0, 3600]"},
		{"float overflow", edit(t, `"deadlineSeconds": 2`, `"deadlineSeconds": 1e999`), "", "malformed"},
		{"bad gate name", edit(t, `"gate": "logistics-api"`, `"gate": "Logistics_API"`), "gate", "RFC 1123"},
		{"empty gate name", edit(t, `"gate": "logistics-api"`, `"gate": ""`), "gate", "must not be empty"},
		{"bad hash", edit(t, `"hash": "abc123"`, `"hash": "a b"`), "hash", "[A-Za-z0-9._:-]"},
		{"negative generation", edit(t, `"generation": 3`, `"generation": -3`), "generation", "at least 0"},
		{"negative workers", edit(t, `"workers": 5`, `"workers": -5`), "workers", "got -5"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse([]byte(tt.in))
			if err == nil {
				t.Fatalf("Parse accepted it: %+v", got)
			}
			if !Equal(got, Document{}) {
				t.Errorf("Parse returned a document with its error: %+v", got)
			}
			if !strings.Contains(err.Error(), tt.wantIn) {
				t.Errorf("error %q does not contain %q", err, tt.wantIn)
			}
			var fe *FieldError
			switch {
			case tt.wantField == "" && errors.As(err, &fe):
				t.Errorf("got a field error %q, want a decoding error", err)
			case tt.wantField != "" && !errors.As(err, &fe):
				t.Errorf("error %q is not a *FieldError", err)
			case tt.wantField != "" && fe.Field != tt.wantField:
				t.Errorf("error names field %q, want %q", fe.Field, tt.wantField)
			}
		})
	}
}

func TestParseUnsupportedVersionIgnoresOtherFields(t *testing.T) {
	// A document of another version may be shaped differently; the reader
	// must say "unsupported version", not complain about missing fields.
	_, err := Parse([]byte(`{"version": 4, "gate": "x", "limits": {"inFlight": 3}}`))
	if !errors.Is(err, ErrUnsupportedVersion) {
		t.Fatalf("got %v, want ErrUnsupportedVersion", err)
	}
	if strings.Contains(err.Error(), "required") {
		t.Errorf("error %q mentions required fields", err)
	}
}

func TestParseMissingFieldsAreAllNamed(t *testing.T) {
	_, err := Parse([]byte(`{"version": 2, "gate": "g", "permits": 1, "pods": {"b": {"permits": 1}, "a": {}}}`))
	if err == nil {
		t.Fatal("Parse accepted a document with missing fields")
	}
	for _, f := range []string{"epoch", "revision", "ratePerSecond", "burst", "queueCapacity", "maxQueueWaitSeconds",
		"acquireTimeoutSeconds", "latencySeconds", "deadlineSeconds", "workers", "retryBudgetPerSecond",
		`pods["a"].permits`, `pods["a"].retryBudgetPerSecond`, `pods["b"].burst`, `pods["b"].workers`} {
		if !strings.Contains(err.Error(), "plan: "+f+": required") {
			t.Errorf("error does not name missing %s: %v", f, err)
		}
	}
}

func TestValidate(t *testing.T) {
	valid := sampleDoc()
	tests := []struct {
		name       string
		mutate     func(*Document)
		wantFields []string
	}{
		{"valid", func(*Document) {}, nil},
		{"zero permits are a plan (strict policy)", func(d *Document) { d.Permits, d.Workers, d.QueueCapacity, d.RetryBudgetPerSecond = 0, 0, 0, 0 }, nil},
		{"rate with burst", func(d *Document) { d.RatePerSecond, d.Burst = 0.5, 1 }, nil},
		{"upper bounds are inclusive", func(d *Document) {
			d.Permits, d.RatePerSecond, d.Burst, d.QueueCapacity, d.Workers = MaxPermits, MaxPerSecond, MaxBurst, MaxQueueCapacity, MaxPermits
			d.MaxQueueWaitSeconds, d.AcquireTimeoutSeconds, d.LatencySeconds, d.DeadlineSeconds = MaxSeconds, MaxSeconds, MaxSeconds, MaxSeconds
		}, nil},
		{"NaN rate", func(d *Document) { d.RatePerSecond = math.NaN() }, []string{"ratePerSecond"}},
		{"Inf budget", func(d *Document) { d.RetryBudgetPerSecond = math.Inf(1) }, []string{"retryBudgetPerSecond"}},
		{"NaN latency", func(d *Document) { d.LatencySeconds = math.NaN() }, []string{"latencySeconds"}},
		{"-Inf timeout", func(d *Document) { d.AcquireTimeoutSeconds = math.Inf(-1) }, []string{"acquireTimeoutSeconds"}},
		{"rate over bound", func(d *Document) { d.RatePerSecond, d.Burst = MaxPerSecond*2, 1 }, []string{"ratePerSecond"}},
		{"long gate", func(d *Document) { d.Gate = strings.Repeat("a", MaxGateLength+1) }, []string{"gate"}},
		{"long downstream", func(d *Document) { d.Downstream = strings.Repeat("a", MaxDownstreamLength+1) }, []string{"downstream"}},
		{"long hash", func(d *Document) { d.Hash = strings.Repeat("a", MaxHashLength+1) }, []string{"hash"}},
		{"every bad field is reported", func(d *Document) {
			d.Permits, d.QueueCapacity, d.MaxQueueWaitSeconds, d.Burst = -1, -2, -3, 7
		}, []string{"permits", "queueCapacity", "burst", "maxQueueWaitSeconds"}},
		{"workers above permits", func(d *Document) { d.Workers = d.Permits + 1 }, []string{"workers"}},
		{"the out-of-memory document: 2³¹−1 workers", func(d *Document) { d.Workers = math.MaxInt32 }, []string{"workers"}},
		{"a waiting room, a rate and a retry budget without a permit", func(d *Document) {
			d.Permits, d.Workers, d.RatePerSecond, d.Burst = 0, 0, 1, 1
		}, []string{"queueCapacity", "ratePerSecond", "retryBudgetPerSecond"}},
		{"a pod's workers above its permits", func(d *Document) {
			d.Pods["w"] = PodShare{Permits: 2, Workers: 3}
		}, []string{`pods["w"].workers`}},
		{"a wait beyond an hour", func(d *Document) { d.MaxQueueWaitSeconds = MaxSeconds + 0.001 }, []string{"maxQueueWaitSeconds"}},
		{"a waiting room beyond a pod", func(d *Document) { d.QueueCapacity = MaxQueueCapacity + 1 }, []string{"queueCapacity"}},
		{"no epoch", func(d *Document) { d.Epoch = "" }, []string{"epoch"}},
		{"epoch of 64 characters", func(d *Document) { d.Epoch = strings.Repeat("A-9", 21) + "z" }, nil},
		{"epoch with a dot", func(d *Document) { d.Epoch = "a.b" }, []string{"epoch"}},
		{"no revision", func(d *Document) { d.Revision = 0 }, []string{"revision"}},
		{"nil pods", func(d *Document) { d.Pods = nil }, nil},
		{"a pod with the largest share", func(d *Document) {
			d.Pods["p"] = PodShare{Permits: MaxPermits, RatePerSecond: MaxPerSecond, Burst: MaxBurst, QueueCapacity: MaxQueueCapacity, Workers: MaxPermits, RetryBudgetPerSecond: MaxPerSecond}
		}, nil},
		{"bad pods in name order, each field named", func(d *Document) {
			d.Pods["b"] = PodShare{Permits: -1, RatePerSecond: math.NaN()}
			d.Pods["a"] = PodShare{Burst: 1, Workers: -1}
			d.Pods["A"] = PodShare{}
		}, []string{`pods["A"]`, `pods["a"].workers`, `pods["a"].burst`, `pods["b"].permits`, `pods["b"].ratePerSecond`}},
		{"a pod name too long", func(d *Document) { d.Pods[strings.Repeat("p", 254)] = PodShare{} }, []string{`pods["` + strings.Repeat("p", 254) + `"]`}},
		{"a pod name with a trailing dash", func(d *Document) { d.Pods["p-"] = PodShare{} }, []string{`pods["p-"]`}},
		{"a pod name with an empty label", func(d *Document) { d.Pods["p..q"] = PodShare{} }, []string{`pods["p..q"]`}},
		{"a dotted pod name", func(d *Document) { d.Pods["p-1.q2"] = PodShare{} }, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := valid
			d.Pods = maps.Clone(valid.Pods)
			tt.mutate(&d)
			err := Validate(d)
			var got []string
			if err != nil {
				for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
					var fe *FieldError
					if !errors.As(e, &fe) {
						t.Fatalf("joined error %q is not a *FieldError", e)
					}
					got = append(got, fe.Field)
				}
			}
			if diff := cmp.Diff(tt.wantFields, got); diff != "" {
				t.Errorf("fields in error (-want +got):\n%s\nerror: %v", diff, err)
			}
		})
	}
}

func TestValidateVersion(t *testing.T) {
	d := sampleDoc()
	d.Permits = -1 // not reported: fields of an unknown version mean nothing
	for _, v := range []int{1, 4} {
		d.Version = v
		err := Validate(d)
		var fe *FieldError
		if !errors.Is(err, ErrUnsupportedVersion) || !errors.As(err, &fe) || fe.Field != "version" {
			t.Fatalf("version %d: got %v, want a version FieldError matching ErrUnsupportedVersion", v, err)
		}
	}
}

func TestMarshal(t *testing.T) {
	d := sampleDoc()
	d.Downstream = "a&b<c>"
	got, err := Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"version":2,"gate":"logistics-api","downstream":"a&b<c>","hash":"abc123","generation":3,` +
		`"epoch":"0f1e-uid","revision":17,` +
		`"permits":5,"ratePerSecond":0,"burst":0,"queueCapacity":9,"maxQueueWaitSeconds":0.1,` +
		`"acquireTimeoutSeconds":0.1,"latencySeconds":0.22,"deadlineSeconds":2,"workers":5,` +
		`"retryBudgetPerSecond":1.25,` +
		`"pods":{"search-gateway-7d9f-abcde":{"permits":6,"ratePerSecond":0,"burst":0,"queueCapacity":10,"workers":6,"retryBudgetPerSecond":1.5},` +
		`"search-gateway-7d9f-zzzzz":{"permits":0,"ratePerSecond":0,"burst":0,"queueCapacity":0,"workers":0,"retryBudgetPerSecond":0}}}`
	if diff := cmp.Diff(want, string(got)); diff != "" {
		t.Errorf("Marshal (-want +got):\n%s", diff)
	}
	back, err := Parse(got)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(d, back); diff != "" {
		t.Errorf("round trip changed the document (-want +got):\n%s", diff)
	}

	// An empty pods field is left out, like a nil one.
	d.Pods = map[string]PodShare{}
	if got, err := Marshal(d); err != nil || strings.Contains(string(got), "pods") {
		t.Errorf("Marshal with empty pods: %s, %v", got, err)
	}
	// -0 in a pod's share is written as 0, and the caller's map is left alone.
	d.Pods = map[string]PodShare{"p": {RatePerSecond: math.Copysign(0, -1)}}
	if got, err := Marshal(d); err != nil || strings.Contains(string(got), "-0") {
		t.Errorf("Marshal with -0: %s, %v", got, err)
	}
	if !math.Signbit(d.Pods["p"].RatePerSecond) {
		t.Error("Marshal wrote to the caller's pods map")
	}
	d = sampleDoc()

	d.Permits = -1
	if _, err := Marshal(d); err == nil {
		t.Error("Marshal wrote an invalid document")
	}
}

func TestHash(t *testing.T) {
	base := sampleDoc()
	h := Hash(base)
	if len(h) != 32 {
		t.Fatalf("Hash length %d, want 32: %q", len(h), h)
	}
	// A fixed value: changing it changes every published hash and makes
	// every pod re-acknowledge, so it must be a deliberate change.
	if want := "b569516f7b4dab338ac6ec608e7bdec7"; h != want {
		t.Errorf("Hash(sample) = %q, want %q", h, want)
	}

	same := base
	same.Generation, same.Hash = 99, "other"
	if Hash(same) != h {
		t.Error("hash depends on generation or on the hash field")
	}
	negZero := base
	negZero.RatePerSecond = math.Copysign(0, -1)
	negZero.Pods = map[string]PodShare{podA: base.Pods[podA], podZ: {RetryBudgetPerSecond: math.Copysign(0, -1)}}
	if Hash(negZero) != h {
		t.Error("-0 and 0 hash differently")
	}
	empty, null := base, base
	empty.Pods, null.Pods = map[string]PodShare{}, nil
	if Hash(empty) != Hash(null) {
		t.Error("empty and nil pods hash differently")
	}
	for name, mutate := range map[string]func(*Document){
		"permits":    func(d *Document) { d.Permits++ },
		"rate":       func(d *Document) { d.RatePerSecond, d.Burst = 1, 1 },
		"wait":       func(d *Document) { d.MaxQueueWaitSeconds += 0.001 },
		"gate":       func(d *Document) { d.Gate = "payments" },
		"downstream": func(d *Document) { d.Downstream = "x" },
		"budget":     func(d *Document) { d.RetryBudgetPerSecond = 0 },
		"epoch":      func(d *Document) { d.Epoch = "other" },
		"revision":   func(d *Document) { d.Revision++ },
		"pod share":  func(d *Document) { d.Pods[podA] = PodShare{Permits: 7} },
		"pod name":   func(d *Document) { d.Pods["other"] = d.Pods[podZ]; delete(d.Pods, podZ) },
		"no pods":    func(d *Document) { d.Pods = nil },
	} {
		d := base
		d.Pods = maps.Clone(base.Pods)
		mutate(&d)
		if Hash(d) == h {
			t.Errorf("changing %s kept the hash", name)
		}
	}
}

func TestDurations(t *testing.T) {
	d := sampleDoc()
	got := []time.Duration{d.MaxQueueWait(), d.AcquireTimeout(), d.Latency(), d.Deadline()}
	want := []time.Duration{100 * time.Millisecond, 100 * time.Millisecond, 220 * time.Millisecond, 2 * time.Second}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("durations (-want +got):\n%s", diff)
	}
	for _, s := range []float64{0.001, 0.3, 1.7, 12.345678901} {
		d.LatencySeconds = s
		if back := d.Latency().Seconds(); back != s {
			t.Errorf("%v s read back as %v s", s, back)
		}
	}
	d.LatencySeconds = MaxSeconds
	if d.Latency() != MaxSeconds*time.Second {
		t.Errorf("MaxSeconds does not fit a duration: %v", d.Latency())
	}
}

func TestKeys(t *testing.T) {
	if got := KeyFor("logistics-api"); got != "logistics-api.json" {
		t.Errorf("KeyFor = %q", got)
	}
	tests := []struct {
		key    string
		gate   string
		wantOK bool
	}{
		{"logistics-api.json", "logistics-api", true},
		{"a.b.c.json", "a.b.c", true},
		{"..data", "", false},
		{"..2026_01_02_03_04_05.123456789", "", false},
		{"..data_tmp", "", false},
		{".json", "", false},
		{"logistics-api", "", false},
		{"logistics-api.yaml", "", false},
		{"Logistics.json", "", false},
		{"-x.json", "", false},
		{strings.Repeat("a", MaxGateLength) + ".json", strings.Repeat("a", MaxGateLength), true},
		{strings.Repeat("a", MaxGateLength+1) + ".json", "", false},
	}
	for _, tt := range tests {
		gate, ok := GateFromKey(tt.key)
		if gate != tt.gate || ok != tt.wantOK {
			t.Errorf("GateFromKey(%q) = %q, %v; want %q, %v", tt.key, gate, ok, tt.gate, tt.wantOK)
		}
		if ok && KeyFor(gate) != tt.key {
			t.Errorf("KeyFor(GateFromKey(%q)) = %q", tt.key, KeyFor(gate))
		}
	}
}

func TestFor(t *testing.T) {
	d := sampleDoc()
	base := d
	base.Pods = nil

	named := base
	named.Permits, named.QueueCapacity, named.Workers, named.RetryBudgetPerSecond = 6, 10, 6, 1.5
	zero := base
	zero.Permits, zero.QueueCapacity, zero.Workers, zero.RetryBudgetPerSecond = 0, 0, 0, 0

	for _, tt := range []struct {
		pod  string
		want Document
	}{
		{podA, named},
		{podZ, zero},
		{"search-gateway-7d9f-other", base},
		{"", base},
	} {
		got := d.For(tt.pod)
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("For(%q) (-want +got):\n%s", tt.pod, diff)
		}
		if err := Validate(got); err != nil {
			t.Errorf("For(%q) is not valid: %v", tt.pod, err)
		}
	}
	// "" names nobody, even if a (invalid) document had an entry for it.
	d.Pods[""] = PodShare{Permits: 99}
	if got := d.For("").Permits; got != 5 {
		t.Errorf(`For("") took the "" entry: permits %d`, got)
	}
	if len(d.Pods) != 3 {
		t.Error("For changed the document's pods")
	}
}

func TestEqual(t *testing.T) {
	a, b := sampleDoc(), sampleDoc()
	if !Equal(a, b) {
		t.Fatal("equal documents are not Equal")
	}
	b.Pods = map[string]PodShare{podA: a.Pods[podA], podZ: a.Pods[podZ]}
	if !Equal(a, b) {
		t.Error("equal pods in another map are not Equal")
	}
	a.Pods, b.Pods = nil, map[string]PodShare{}
	if !Equal(a, b) {
		t.Error("nil and empty pods are not Equal")
	}
	for name, mutate := range map[string]func(*Document){
		"generation":  func(d *Document) { d.Generation++ },
		"hash":        func(d *Document) { d.Hash = "x" },
		"epoch":       func(d *Document) { d.Epoch = "x" },
		"revision":    func(d *Document) { d.Revision++ },
		"base share":  func(d *Document) { d.Workers++ },
		"latency":     func(d *Document) { d.LatencySeconds++ },
		"a pod share": func(d *Document) { d.Pods[podZ] = PodShare{Permits: 1} },
		"a pod name":  func(d *Document) { d.Pods["x"] = d.Pods[podZ]; delete(d.Pods, podZ) },
		"a pod more":  func(d *Document) { d.Pods["x"] = PodShare{} },
	} {
		a, b := sampleDoc(), sampleDoc()
		mutate(&b)
		if Equal(a, b) || Equal(b, a) {
			t.Errorf("documents differing in %s are Equal", name)
		}
	}
}

func TestManyPods(t *testing.T) {
	d := sampleDoc()
	d.Pods = manyPods(MaxPods)
	if err := Validate(d); err != nil {
		t.Fatalf("a document naming MaxPods pods: %v", err)
	}
	d.Pods["one-too-many"] = PodShare{}
	var fe *FieldError
	if err := Validate(d); !errors.As(err, &fe) || fe.Field != "pods" || !strings.Contains(err.Error(), "at most 100000 entries, got 100001") {
		t.Errorf("Validate of MaxPods+1 pods: %v", err)
	}
	if _, err := Marshal(d); err == nil {
		t.Error("Marshal wrote MaxPods+1 pods")
	}
	if testing.Short() {
		return // reading 13 MB of JSON takes a while under -race
	}
	data, err := encode(d) // what a writer that skipped Validate would publish
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Parse(data); !errors.As(err, &fe) || fe.Field != "pods" {
		t.Errorf("Parse of MaxPods+1 pods: %v", err)
	}
}

// A document naming a thousand pods reads back as written.
func TestParseManyPods(t *testing.T) {
	d := sampleDoc()
	d.Pods = manyPods(1000)
	data, err := Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	if !Equal(got, d) {
		t.Error("a document naming 1000 pods did not read back")
	}
}

// manyPods returns n pods with distinct, valid shares.
func manyPods(n int) map[string]PodShare {
	pods := make(map[string]PodShare, n)
	for i := range n {
		pods[fmt.Sprintf("search-gateway-7d9f5c6b8-%05d", i)] = PodShare{
			Permits: 1 + i%7, RatePerSecond: float64(i%3) * 1.5, Burst: min(i%3, 1) * 2,
			QueueCapacity: i % 11, Workers: 1 + i%7, RetryBudgetPerSecond: 0.25,
		}
	}
	return pods
}

// BenchmarkParse reads a document naming none, a hundred, and the most
// pods a document may name.
func BenchmarkParse(b *testing.B) {
	for _, n := range []int{0, 100, MaxPods} {
		d := sampleDoc()
		d.Pods = manyPods(n)
		data, err := Marshal(d)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("pods=%d", n), func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Parse(data); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
