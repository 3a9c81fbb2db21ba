// Package sourcetest holds what the tests of the library's plan sources
// share, in the library's module and in its API server tests
// (internal/apitest): valid plan documents, a subscriber that records
// what a source delivers, a log sink, a directory written the way the
// kubelet writes a ConfigMap volume, and the ConfigMaps a source follows.
// It does not import the sources, so that their own tests may use it.
package sourcetest
