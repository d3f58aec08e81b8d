//go:build !gracepoll_mutation

package poller

const mutation = mutNone
