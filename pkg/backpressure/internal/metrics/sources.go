package metrics

import (
	"fmt"
	"sort"
	"sync"
)

// sources is a set of named metric sources, kept in name order so that a
// scrape emits them in a stable order.
type sources[S interface{ Name() string }] struct {
	kind   string
	mu     sync.RWMutex
	byName map[string]S
}

func (s *sources[S]) add(src S) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, dup := s.byName[src.Name()]; dup {
		return fmt.Errorf("metrics: a %s named %q is already collected", s.kind, src.Name())
	}
	if s.byName == nil {
		s.byName = make(map[string]S)
	}
	s.byName[src.Name()] = src
	return nil
}

func (s *sources[S]) remove(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.byName, name)
}

func (s *sources[S]) list() []S {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]S, 0, len(s.byName))
	for _, src := range s.byName {
		out = append(out, src)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name() < out[j].Name() })
	return out
}
