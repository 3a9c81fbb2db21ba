package fifo

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// contents walks the list both ways and checks that the walks agree with
// each other and with Len.
func contents(t *testing.T, l *List[int]) []int {
	t.Helper()
	var fwd, back []int
	for e := l.head; e != nil; e = e.next {
		fwd = append(fwd, e.Value)
	}
	for e := l.tail; e != nil; e = e.prev {
		back = append(back, e.Value)
	}
	slices.Reverse(back)
	if !slices.Equal(fwd, back) || len(fwd) != l.Len() {
		t.Fatalf("list is inconsistent: forward %v, backward %v, Len %d", fwd, back, l.Len())
	}
	return fwd
}

// TestListMatchesSlice applies random pushes, removals from anywhere and
// pops to a List and to a slice model, and compares them after every step.
func TestListMatchesSlice(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var l List[int]
	var model []int
	in := map[int]*Entry[int]{}
	allocated, most := 0, 0
	next := 0
	for step := 0; step < 20000; step++ {
		switch op := rng.IntN(3); {
		case op == 0 || len(model) == 0:
			e := l.New()
			if e.Value == 0 {
				allocated++
			}
			next++
			e.Value = next
			l.PushBack(e)
			in[next] = e
			model = append(model, next)
		case op == 1:
			i := rng.IntN(len(model))
			v := model[i]
			l.Remove(in[v])
			l.Recycle(in[v])
			delete(in, v)
			model = slices.Delete(model, i, i+1)
		default:
			e := l.PopFront()
			if e.Value != model[0] {
				t.Fatalf("step %d: PopFront = %d, want %d", step, e.Value, model[0])
			}
			delete(in, e.Value)
			l.Recycle(e)
			model = model[1:]
		}
		most = max(most, len(model))
		if got := contents(t, &l); !slices.Equal(got, model) {
			t.Fatalf("step %d: list %v, want %v", step, got, model)
		}
		if f := l.Front(); (f == nil) != (len(model) == 0) || (f != nil && f.Value != model[0]) {
			t.Fatalf("step %d: Front wrong for %v", step, model)
		}
	}
	// Recycled entries are reused: the list allocated no more entries than
	// it ever held at once.
	if allocated > most {
		t.Errorf("allocated %d entries but held at most %d at once: recycled entries are not reused", allocated, most)
	}
}

func TestNewReusesRecycledValue(t *testing.T) {
	var l List[chan struct{}]
	e := l.New()
	e.Value = make(chan struct{}, 1)
	ch := e.Value
	l.Recycle(e)
	if got := l.New(); got != e || got.Value != ch {
		t.Error("New did not return the recycled entry with the value it was recycled with")
	}
	if fresh := l.New(); fresh == e || fresh.Value != nil {
		t.Error("New on an empty free list must return a new entry with the zero value")
	}
}
