package main

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// status lists a StatefulSet's pods in the order of their ordinals, and
// any other names by their numbers where they differ only there.
func TestPodsInNaturalOrder(t *testing.T) {
	want := []string{
		"search-gateway-1", "search-gateway-2", "search-gateway-9", "search-gateway-10", "search-gateway-11",
		"search-gateway-77b4959f59-4662j", "search-gateway-77b4959f59-g9hw2", "search-gateway-100", "search-gateway-a",
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20 {
		pods := make([]corev1.Pod, len(want))
		for i, name := range want {
			pods[i] = corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}}
		}
		rng.Shuffle(len(pods), func(i, j int) { pods[i], pods[j] = pods[j], pods[i] })
		sortPods(pods)
		var got []string
		for _, p := range pods {
			got = append(got, p.Name)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("pod order (-want +got):\n%s", diff)
		}
	}
}

// The order is total and consistent, whatever the names: antisymmetric,
// transitive on random names of letters, digits and dashes.
func TestNaturalCompareIsAnOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	const alphabet = "ab-0123456789"
	name := func() string {
		b := make([]byte, rng.IntN(8))
		for i := range b {
			b[i] = alphabet[rng.IntN(len(alphabet))]
		}
		return string(b)
	}
	for range 5000 {
		a, b, c := name(), name(), name()
		if naturalCompare(a, b) != -naturalCompare(b, a) {
			t.Fatalf("not antisymmetric: %q, %q", a, b)
		}
		if (naturalCompare(a, b) == 0) != (a == b) {
			t.Fatalf("%q and %q compare equal", a, b)
		}
		s := []string{a, b, c}
		slices.SortFunc(s, naturalCompare)
		if naturalCompare(s[0], s[1]) > 0 || naturalCompare(s[1], s[2]) > 0 || naturalCompare(s[0], s[2]) > 0 {
			t.Fatalf("not transitive: %q", s)
		}
	}
}
