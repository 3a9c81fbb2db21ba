package reload

import (
	"testing"

	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/internal/sourcetest"
)

func getenvFrom(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

func TestAcknowledgementNeedsThePodsName(t *testing.T) {
	vol := sourcetest.NewVolume(t, map[string]string{"a.json": sourcetest.Encode(t, sourcetest.Doc("a", 1))})
	logs := &sourcetest.LogSink{}
	s, err := NewDirSource(vol.Dir, DirOptions{Options: Options{
		Subscriber: func(Update) {},
		Logger:     logs.Logger(),
		Ack:        &AckOptions{Getenv: getenvFrom(map[string]string{EnvPodNamespace: "shop"})},
	}})
	if err != nil {
		t.Fatalf("a missing POD_NAME must not be fatal: %v", err)
	}
	if s.acker != nil {
		t.Error("acknowledgement is on without POD_NAME")
	}
	if logs.Count("plans will not be acknowledged") != 1 {
		t.Errorf("the disabled acknowledgement was not logged:\n%s", logs)
	}

	// With the pod known, a DirSource needs a client to patch it.
	_, err = NewDirSource(vol.Dir, DirOptions{Options: Options{
		Subscriber: func(Update) {},
		Ack:        &AckOptions{Getenv: getenvFrom(map[string]string{EnvPodName: "p", EnvPodNamespace: "shop"})},
	}})
	if err == nil {
		t.Error("acknowledgement without a client was accepted")
	}
}
