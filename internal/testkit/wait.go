package testkit

import (
	"testing"
	"time"
)

// Wait waits for ch to be closed or to yield a value, and fails the test
// (t.Fatalf, naming what) if neither happens within timeout.
func Wait[T any](t testing.TB, ch <-chan T, timeout time.Duration, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(timeout):
		t.Fatalf("%s: not within %v", what, timeout)
	}
	var zero T
	return zero
}

// Eventually polls cond every millisecond until it holds, and fails the
// test (t.Fatalf, naming what) if it does not within timeout.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, timeout)
		}
		time.Sleep(time.Millisecond)
	}
}

// Within calls f on another goroutine and returns its error; if f does not
// return within timeout it fails the test (t.Fatalf, "what did not return
// within ...") rather than hanging the test binary.
func Within(t testing.TB, timeout time.Duration, what string, f func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		return err
	case <-time.After(timeout):
		t.Fatalf("%s did not return within %v", what, timeout)
	}
	return nil
}
