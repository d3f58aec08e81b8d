//go:build gracepoll_mutation

package poller

// mutation is set by tests (export_mutation_test.go) before New.
var mutation = mutNone
