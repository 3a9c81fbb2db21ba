// Package sharetest holds what the tests of package backpressure share,
// in the library's module and in its API server tests (internal/apitest):
// plan documents that divide a gate among pods, their writing into a plan
// directory, a recorder of the shares a Runtime puts in force, and the
// lookups and waits every such test makes.
package sharetest
