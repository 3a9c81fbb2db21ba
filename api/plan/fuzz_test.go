package plan

import (
	"bytes"
	"errors"
	"testing"
)

// FuzzParsePlan checks that whatever Parse accepts is valid, within the
// bounds, encodes, and reads back as the same document with the same bytes
// and hash; and that whatever it rejects comes with an error and no
// document.
func FuzzParsePlan(f *testing.F) {
	f.Add([]byte(sample))
	f.Add([]byte(`{"version":2,"gate":"g","epoch":"e","revision":1,"permits":0,"ratePerSecond":1e-300,"burst":1,"queueCapacity":0,` +
		`"maxQueueWaitSeconds":0,"acquireTimeoutSeconds":0,"latencySeconds":0,"deadlineSeconds":0,"workers":0,` +
		`"retryBudgetPerSecond":0,"pods":{}}`))
	f.Add([]byte(`{"version":2,"gate":"a.b","downstream":"\u00e9\ud83d\ude00<&>","epoch":"A-z","revision":9223372036854775807,"permits":2147483647,` +
		`"ratePerSecond":2147483647,"burst":2147483647,"queueCapacity":1,"maxQueueWaitSeconds":31622400,` +
		`"acquireTimeoutSeconds":-0,"latencySeconds":5e-324,"deadlineSeconds":1.7976931348623157e-300,"workers":3,` +
		`"retryBudgetPerSecond":0.1,"unknown":[{"x":null}],` +
		`"pods":{"p.q":{"permits":1,"ratePerSecond":-0,"burst":0,"queueCapacity":2,"workers":3,"retryBudgetPerSecond":-0,"x":1},` +
		`"a":{"permits":0,"ratePerSecond":5e-324,"burst":1,"queueCapacity":0,"workers":0,"retryBudgetPerSecond":2147483647}}}`))
	f.Add([]byte(`{"version":3,"gate":"g","epoch":"e","revision":2,"permits":0,"ratePerSecond":0,"burst":0,"queueCapacity":0,` +
		`"maxQueueWaitSeconds":0,"acquireTimeoutSeconds":0,"latencySeconds":0,"deadlineSeconds":0,"workers":0,"retryBudgetPerSecond":0,` +
		`"shares":[{"permits":2,"ratePerSecond":0,"burst":0,"queueCapacity":1,"workers":2,"retryBudgetPerSecond":0.5,"pods":["b","a"]},` +
		`{"permits":1,"ratePerSecond":0,"burst":0,"queueCapacity":0,"workers":1,"retryBudgetPerSecond":0,"pods":["c"]}]}`))
	f.Add([]byte(`{"version":3,"shares":[{"pods":["a","a"]},null],"pods":{}}`))
	f.Add([]byte(`{"version":1}`))
	f.Add([]byte(`{"version":3}`))
	f.Add([]byte(`{"version":2,"permits":1,"permits":2}`))
	f.Add([]byte(`{"version":2,"pods":{"a":null,"a":{}}}`))
	f.Add([]byte(`null`))
	f.Add([]byte(`{"version":2.0}`))
	// What could run a pod out of memory: workers and a waiting room far
	// beyond what a pod holds, and shares granted to a pod with no permit.
	f.Add([]byte(`{"version":2,"gate":"g","epoch":"e","revision":1,"permits":2147483647,"ratePerSecond":0,"burst":0,` +
		`"queueCapacity":2147483647,"maxQueueWaitSeconds":31622400,"acquireTimeoutSeconds":0,"latencySeconds":0,` +
		`"deadlineSeconds":0,"workers":2147483647,"retryBudgetPerSecond":0}`))
	f.Add([]byte(`{"version":2,"gate":"g","epoch":"e","revision":1,"permits":1048575,"ratePerSecond":1000000000,"burst":1000000000,` +
		`"queueCapacity":1048575,"maxQueueWaitSeconds":3600,"acquireTimeoutSeconds":3600,"latencySeconds":3600,` +
		`"deadlineSeconds":3600,"workers":1048575,"retryBudgetPerSecond":1000000000,` +
		`"pods":{"a":{"permits":0,"ratePerSecond":0,"burst":0,"queueCapacity":5,"workers":0,"retryBudgetPerSecond":1}}}`))

	f.Fuzz(func(t *testing.T, data []byte) {
		d, err := Parse(data)
		if err != nil {
			if !Equal(d, Document{}) {
				t.Fatalf("Parse returned %+v with error %v", d, err)
			}
			return
		}
		if err := Validate(d); err != nil {
			t.Fatalf("Parse accepted a document Validate rejects: %v\ninput: %q", err, data)
		}
		withinBounds(t, d, data)
		if d.Hash == "" {
			t.Fatalf("Parse left the hash empty for %q", data)
		}
		enc, err := Marshal(d)
		if err != nil {
			t.Fatalf("Marshal(%+v): %v", d, err)
		}
		back, err := Parse(enc)
		if err != nil {
			t.Fatalf("Parse(Marshal(d)): %v\nencoded: %s", err, enc)
		}
		if !Equal(back, d) {
			t.Fatalf("round trip changed the document:\n got %+v\nwant %+v", back, d)
		}
		again, err := Marshal(back)
		if err != nil || !bytes.Equal(again, enc) {
			t.Fatalf("encoding is not stable: %s vs %s (%v)", enc, again, err)
		}
		if Hash(back) != Hash(d) {
			t.Fatalf("hash changed across a round trip")
		}
		if errors.Is(Validate(back), ErrUnsupportedVersion) {
			t.Fatalf("round trip changed the version")
		}
		// Every pod's view is a valid document, and names no pods.
		for name := range d.Pods {
			view := d.For(name)
			if err := Validate(view); err != nil || view.Pods != nil {
				t.Fatalf("For(%q) = %+v, %v", name, view, err)
			}
		}
		// The acknowledgement reads back.
		if a, err := ParseAck(AckFor(d).String()); err != nil || a != AckFor(d) {
			t.Fatalf("ParseAck(%q) = %+v, %v", AckFor(d), a, err)
		}
	})
}

// withinBounds fails t when d, the base share or any pod's, holds a value
// outside the bounds of the field table or more workers than permits. It
// reads the fields directly rather than through Validate, so that a gap in
// Validate cannot hide itself.
func withinBounds(t *testing.T, d Document, data []byte) {
	t.Helper()
	shares := map[string]PodShare{"(base)": d.Share()}
	for name, s := range d.Pods {
		shares[name] = s
	}
	for _, f := range Fields() {
		for name, s := range shares {
			if !f.PerPod && name != "(base)" {
				continue
			}
			var x float64
			if v := f.value(&d, &s); v.CanInt() {
				x = float64(v.Int())
			} else {
				x = v.Float()
			}
			if !(x >= 0 && x <= f.Max) {
				t.Fatalf("Parse accepted %s %s = %v outside [0, %v]\ninput: %q", name, f.Key, x, f.Max, data)
			}
		}
	}
	for name, s := range shares {
		if s.Workers > s.Permits || s.Permits == 0 && (s.QueueCapacity != 0 || s.RatePerSecond != 0 || s.RetryBudgetPerSecond != 0) {
			t.Fatalf("Parse accepted %s's inconsistent share %+v\ninput: %q", name, s, data)
		}
	}
}
