package testkit

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// FDs returns the open fds of the process, with what they point to (the
// link in /proc/self/fd). An fd whose link cannot be read is left out: the
// directory fd the listing itself used, closed by then, or one closed
// meanwhile.
func FDs(t testing.TB) map[int]string {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatalf("read /proc/self/fd: %v", err)
	}
	m := make(map[int]string, len(ents))
	for _, e := range ents {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		target, err := os.Readlink("/proc/self/fd/" + e.Name())
		if err != nil {
			continue
		}
		m[n] = target
	}
	return m
}

// FDDiff describes how after differs from before, sorted: the fds opened
// since ("leaked") and the fds closed since ("closed a non-owned fd").
func FDDiff(before, after map[int]string) []string {
	var diff []string
	for fd, target := range after {
		if _, ok := before[fd]; !ok {
			diff = append(diff, fmt.Sprintf("leaked fd %d -> %s", fd, target))
		}
	}
	for fd, target := range before {
		if _, ok := after[fd]; !ok {
			diff = append(diff, fmt.Sprintf("closed a non-owned fd %d -> %s", fd, target))
		}
	}
	slices.Sort(diff)
	return diff
}

// ExpectFDs fails the test (t.Errorf) if the open fds differ from before,
// listing what leaked and what vanished. With settle > 0 it looks again
// every 5 ms for up to settle before it fails, for fds that are closed
// late (package net closes a client's fd when its last operation
// returns); with 0 it looks once.
func ExpectFDs(t testing.TB, before map[int]string, settle time.Duration) {
	t.Helper()
	deadline := time.Now().Add(settle)
	for {
		after := FDs(t)
		diff := FDDiff(before, after)
		if len(diff) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("fd set changed (%d before, %d after):\n%s", len(before), len(after), strings.Join(diff, "\n"))
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// CheckFDLeak records the open fds now and, at cleanup (after the cleanups
// registered later, such as a poller's or a server's Close), calls
// [ExpectFDs] with settle.
func CheckFDLeak(t testing.TB, settle time.Duration) {
	t.Helper()
	before := FDs(t)
	t.Cleanup(func() { ExpectFDs(t, before, settle) })
}
