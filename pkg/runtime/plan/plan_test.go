package plan

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// sample is the document of the design's ConfigMap contract, with a hash.
const sample = `{"version": 1, "gate": "logistics-api", "downstream": "logistics.example.com",
 "hash": "abc123", "generation": 3,
 "permits": 5, "ratePerSecond": 0, "burst": 0,
 "queueCapacity": 9, "maxQueueWaitSeconds": 0.1, "acquireTimeoutSeconds": 0.1,
 "latencySeconds": 0.22, "deadlineSeconds": 2, "workers": 5,
 "retryBudgetPerSecond": 1.25}`

func sampleDoc() Document {
	return Document{
		Version: 1, Gate: "logistics-api", Downstream: "logistics.example.com",
		Hash: "abc123", Generation: 3,
		Permits: 5, QueueCapacity: 9, MaxQueueWaitSeconds: 0.1, AcquireTimeoutSeconds: 0.1,
		LatencySeconds: 0.22, DeadlineSeconds: 2, Workers: 5, RetryBudgetPerSecond: 1.25,
	}
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
			if math.Signbit(got.LatencySeconds) {
				t.Errorf("latencySeconds kept its negative sign")
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
		{"not JSON", `{"version": 1,`, "", "malformed"},
		{"not an object", `[1, 2]`, "", "malformed"},
		{"trailing data", sample + ` {}`, "", "malformed"},
		{"null document", `null`, "version", "required"},
		{"duplicate field", edit(t, `"permits": 5,`, `"permits": 5, "permits": 500,`), "", "duplicate"},
		{"missing version", edit(t, `"version": 1,`, ``), "version", "required"},
		{"unknown major version", edit(t, `"version": 1`, `"version": 2`), "version", "unsupported version 2"},
		{"version zero", edit(t, `"version": 1`, `"version": 0`), "version", "unsupported version 0"},
		{"fractional version", edit(t, `"version": 1`, `"version": 1.5`), "", "malformed"},
		{"missing permits", edit(t, `"permits": 5,`, ``), "permits", "required"},
		{"null permits", edit(t, `"permits": 5`, `"permits": null`), "permits", "required"},
		{"names are case-sensitive", edit(t, `"permits": 5`, `"Permits": 5`), "permits", "required"},
		{"missing gate", edit(t, `"gate": "logistics-api",`, ``), "gate", "required"},
		{"fractional permits", edit(t, `"permits": 5`, `"permits": 5.5`), "", "malformed"},
		{"integer as string", edit(t, `"permits": 5`, `"permits": "5"`), "", "malformed"},
		{"negative permits", edit(t, `"permits": 5`, `"permits": -1`), "permits", "[0, 2147483647], got -1"},
		{"permits beyond int32", edit(t, `"permits": 5`, `"permits": 2147483648`), "permits", "[0, 2147483647]"},
		{"negative rate", edit(t, `"ratePerSecond": 0`, `"ratePerSecond": -0.5`), "ratePerSecond", "[0, 2147483647]"},
		{"rate without burst", edit(t, `"ratePerSecond": 0`, `"ratePerSecond": 10`), "burst", "at least 1 when ratePerSecond is set"},
		{"burst without rate", edit(t, `"burst": 0`, `"burst": 4`), "burst", "must be 0 when ratePerSecond is 0"},
		{"negative wait", edit(t, `"maxQueueWaitSeconds": 0.1`, `"maxQueueWaitSeconds": -0.1`), "maxQueueWaitSeconds", "seconds in [0, 31622400]"},
		{"huge deadline", edit(t, `"deadlineSeconds": 2`, `"deadlineSeconds": 1e300`), "deadlineSeconds", "seconds in [0, 31622400]"},
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
			if got != (Document{}) {
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
	// A version-2 document may be shaped differently; the reader must say
	// "unsupported version", not complain about v1 fields.
	_, err := Parse([]byte(`{"version": 2, "gate": "x", "limits": {"inFlight": 3}}`))
	if !errors.Is(err, ErrUnsupportedVersion) {
		t.Fatalf("got %v, want ErrUnsupportedVersion", err)
	}
	if strings.Contains(err.Error(), "required") {
		t.Errorf("error %q mentions required fields", err)
	}
}

func TestParseMissingFieldsAreAllNamed(t *testing.T) {
	_, err := Parse([]byte(`{"version": 1, "gate": "g", "permits": 1}`))
	if err == nil {
		t.Fatal("Parse accepted a document with missing fields")
	}
	for _, f := range []string{"ratePerSecond", "burst", "queueCapacity", "maxQueueWaitSeconds",
		"acquireTimeoutSeconds", "latencySeconds", "deadlineSeconds", "workers", "retryBudgetPerSecond"} {
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
		{"zero permits are a plan (strict policy)", func(d *Document) { d.Permits, d.Workers, d.QueueCapacity = 0, 0, 0 }, nil},
		{"rate with burst", func(d *Document) { d.RatePerSecond, d.Burst = 0.5, 1 }, nil},
		{"upper bounds are inclusive", func(d *Document) {
			d.Permits, d.RatePerSecond, d.Burst, d.DeadlineSeconds = MaxCount, MaxPerSecond, MaxCount, MaxSeconds
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
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := valid
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
	d.Version = 3
	d.Permits = -1 // not reported: fields of an unknown version mean nothing
	err := Validate(d)
	var fe *FieldError
	if !errors.Is(err, ErrUnsupportedVersion) || !errors.As(err, &fe) || fe.Field != "version" {
		t.Fatalf("got %v, want a version FieldError matching ErrUnsupportedVersion", err)
	}
}

func TestMarshal(t *testing.T) {
	d := sampleDoc()
	d.Downstream = "a&b<c>"
	got, err := Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"version":1,"gate":"logistics-api","downstream":"a&b<c>","hash":"abc123","generation":3,` +
		`"permits":5,"ratePerSecond":0,"burst":0,"queueCapacity":9,"maxQueueWaitSeconds":0.1,` +
		`"acquireTimeoutSeconds":0.1,"latencySeconds":0.22,"deadlineSeconds":2,"workers":5,` +
		`"retryBudgetPerSecond":1.25}`
	if diff := cmp.Diff(want, string(got)); diff != "" {
		t.Errorf("Marshal (-want +got):\n%s", diff)
	}
	back, err := Parse(got)
	if err != nil {
		t.Fatal(err)
	}
	if back != d {
		t.Errorf("round trip changed the document: %+v", back)
	}

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
	if want := "6bf7c0e76b4b373f444c17da734b5613"; h != want {
		t.Errorf("Hash(sample) = %q, want %q", h, want)
	}

	same := base
	same.Generation, same.Hash = 99, "other"
	if Hash(same) != h {
		t.Error("hash depends on generation or on the hash field")
	}
	negZero := base
	negZero.RatePerSecond = math.Copysign(0, -1)
	if Hash(negZero) != h {
		t.Error("-0 and 0 hash differently")
	}
	for name, mutate := range map[string]func(*Document){
		"permits":    func(d *Document) { d.Permits++ },
		"rate":       func(d *Document) { d.RatePerSecond, d.Burst = 1, 1 },
		"wait":       func(d *Document) { d.MaxQueueWaitSeconds += 0.001 },
		"gate":       func(d *Document) { d.Gate = "payments" },
		"downstream": func(d *Document) { d.Downstream = "x" },
		"budget":     func(d *Document) { d.RetryBudgetPerSecond = 0 },
	} {
		d := base
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
