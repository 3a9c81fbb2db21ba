package plan

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

// A document without unacknowledgedDelaySeconds, as every operator wrote
// before the field, reads as an unknown delay and keeps its hash.
func TestUnacknowledgedDelayOptional(t *testing.T) {
	d, err := Parse([]byte(sample))
	if err != nil {
		t.Fatal(err)
	}
	if d.UnacknowledgedDelaySeconds != 0 || d.UnacknowledgedDelay() != 0 {
		t.Fatalf("delay of a document without the field = %v, want 0", d.UnacknowledgedDelaySeconds)
	}
	d.Hash = ""
	b, err := Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "unacknowledgedDelaySeconds") {
		t.Fatalf("a document without a delay encodes it: %s", b)
	}
}

func TestUnacknowledgedDelayRoundTrip(t *testing.T) {
	d := sampleDoc()
	withoutHash := Hash(d)
	d.UnacknowledgedDelaySeconds = 150
	if Hash(d) == withoutHash {
		t.Fatal("the delay does not change the hash: a pod would not see it change")
	}
	d.Hash = Hash(d)
	for _, version := range []int{CurrentVersion, CompactVersion} {
		d.Version = version
		d.Hash = Hash(d)
		b, err := Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), `"unacknowledgedDelaySeconds":150`) {
			t.Fatalf("version %d: encoding lacks the delay: %s", version, b)
		}
		got, err := Parse(b)
		if err != nil {
			t.Fatal(err)
		}
		if !Equal(got, d) || got.UnacknowledgedDelay() != 150*time.Second {
			t.Fatalf("version %d: round trip = %+v, want %+v", version, got, d)
		}
	}
	e := d
	e.UnacknowledgedDelaySeconds = 151
	if Equal(d, e) {
		t.Fatal("Equal ignores the delay")
	}
}

func TestUnacknowledgedDelayBounds(t *testing.T) {
	for _, v := range []float64{-1, MaxSeconds + 1, math.Inf(1), math.NaN()} {
		d := sampleDoc()
		d.UnacknowledgedDelaySeconds = v
		err := Validate(d)
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != "unacknowledgedDelaySeconds" {
			t.Errorf("delay %v: error %v, want one naming unacknowledgedDelaySeconds", v, err)
		}
	}
	b := strings.Replace(sample, `"retryBudgetPerSecond": 1.25,`, `"retryBudgetPerSecond": 1.25, "unacknowledgedDelaySeconds": -3,`, 1)
	if _, err := Parse([]byte(b)); err == nil || !strings.Contains(err.Error(), "unacknowledgedDelaySeconds") {
		t.Fatalf("Parse of a negative delay: %v, want an error naming the field", err)
	}
}
