// The dispatcher's comparison with its peers (ants), in a module of its own
// so that an application that requires the library does not get ants in its
// module graph. `make bench` runs it.
module github.com/backpressure-dev/backpressure-operator/hack/bench

go 1.26.0

require (
	github.com/backpressure-dev/backpressure-operator/pkg/backpressure v0.0.0
	github.com/panjf2000/ants/v2 v2.12.1
)

require golang.org/x/sync v0.23.0 // indirect

replace (
	github.com/backpressure-dev/backpressure-operator/api/plan => ../../api/plan
	github.com/backpressure-dev/backpressure-operator/api/reserve => ../../api/reserve
	github.com/backpressure-dev/backpressure-operator/pkg/backpressure => ../../pkg/backpressure
)
