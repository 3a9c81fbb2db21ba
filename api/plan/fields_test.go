package plan

import (
	"maps"
	"reflect"
	"slices"
	"testing"
)

// numericKeys returns the JSON names of t's int and float64 fields, in
// order, leaving out the identifiers of a document (version, generation,
// revision), which are not numbers of the plan, and the handover's
// unacknowledgedDelaySeconds, which is optional (older documents lack it)
// and sizes nothing: Validate checks it on its own.
func numericKeys(t reflect.Type) []string {
	var keys []string
	for key, i := range jsonIndex(t) {
		switch key {
		case "version", "generation", "revision", "unacknowledgedDelaySeconds":
			continue
		}
		if k := t.Field(i).Type.Kind(); k == reflect.Int || k == reflect.Float64 {
			keys = append(keys, key)
		}
	}
	slices.SortFunc(keys, func(a, b string) int { return jsonIndex(t)[a] - jsonIndex(t)[b] })
	return keys
}

// Every number of a document has exactly one row in the field table, and
// the wire structs decode exactly the fields of the document.
func TestFieldsCoverTheDocument(t *testing.T) {
	var perPod, shared []string
	for _, f := range Fields() {
		if f.PerPod {
			perPod = append(perPod, f.Key)
		} else {
			shared = append(shared, f.Key)
		}
		if f.Max <= 0 || f.Meaning == "" || f.Derived == "" || f.Unit == "" {
			t.Errorf("field %s: incomplete row %+v", f.Key, f)
		}
	}
	if got, want := perPod, numericKeys(reflect.TypeFor[PodShare]()); !slices.Equal(got, want) {
		t.Errorf("per-pod rows %v, want PodShare's fields %v", got, want)
	}
	var top []string
	for _, k := range numericKeys(reflect.TypeFor[Document]()) {
		if !slices.Contains(perPod, k) {
			top = append(top, k)
		}
	}
	if !slices.Equal(shared, top) {
		t.Errorf("shared rows %v, want Document's other numbers %v", shared, top)
	}
	for wire, model := range map[reflect.Type]reflect.Type{
		reflect.TypeFor[wireDocument](): reflect.TypeFor[Document](),
		reflect.TypeFor[wirePodShare](): reflect.TypeFor[PodShare](),
	} {
		w, m := slices.Sorted(maps.Keys(jsonIndex(wire))), slices.Sorted(maps.Keys(jsonIndex(model)))
		if wire == reflect.TypeFor[wireDocument]() {
			// Version 3 lists the pods in shares.
			m = slices.Sorted(slices.Values(append(m, "shares")))
		}
		if !slices.Equal(w, m) {
			t.Errorf("%s decodes %v, want the fields of %s %v", wire.Name(), w, model.Name(), m)
		}
	}
}

// Share, WithShare and For carry every per-pod field, and Equal sees a
// change in every field of the table.
func TestShareCarriesEveryField(t *testing.T) {
	var s PodShare
	for i, f := range Fields() {
		if !f.PerPod {
			continue
		}
		v := f.value(nil, &s)
		if v.CanInt() {
			v.SetInt(int64(i + 1))
		} else {
			v.SetFloat(float64(i) + 0.5)
		}
	}
	d := sampleDoc().WithShare(s)
	if d.Share() != s {
		t.Errorf("Share() after WithShare = %+v, want %+v", d.Share(), s)
	}
	named := sampleDoc().WithShare(PodShare{})
	named.Pods = map[string]PodShare{"p": s}
	if view := named.For("p"); view.Share() != s || view.Pods != nil {
		t.Errorf("For(p) = %+v, want p's share %+v", view.Share(), s)
	}
	for _, f := range Fields() {
		a, b := sampleDoc(), sampleDoc()
		v := f.topLevel(&b)
		if v.CanInt() {
			v.SetInt(v.Int() + 1)
		} else {
			v.SetFloat(v.Float() + 1)
		}
		if Equal(a, b) {
			t.Errorf("documents differing in %s are Equal", f.Key)
		}
	}
}
