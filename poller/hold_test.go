//go:build linux

package poller_test

import (
	"context"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gracepoll/gracepoll/poller"
)

// TestHoldsDelayReleaseNotDelete checks that holds delay OnRelease (and closing an owned fd), never Delete.
func TestHoldsDelayReleaseNotDelete(t *testing.T) {
	forEachConfig(t, func(t *testing.T, opts poller.Options) {
		p := newPoller(t, opts)
		fd := newEventfd(t)
		released := make(chan struct{})
		h, err := p.Add(poller.Registration{FD: fd, Events: poller.Readable, CloseFD: true, OnEvent: nop,
			OnRelease: func(poller.Released) { close(released) }})
		if err != nil {
			t.Fatal(err)
		}
		r1, err := p.Hold(h)
		if err != nil {
			t.Fatal(err)
		}
		r2, err := p.Hold(h)
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- p.Delete(h) }()
		if err := wait(t, done, "Delete with holds taken"); err != nil {
			t.Fatal(err)
		}
		if err := p.Barrier(context.Background()); err != nil {
			t.Fatal(err)
		}
		time.Sleep(quiet)
		select {
		case <-released:
			t.Fatal("OnRelease ran while holds were taken")
		default:
		}
		if err := isOpen(fd); err != nil {
			t.Fatalf("owned fd closed while held: %v", err)
		}
		r1()
		r1() // a second call does nothing
		time.Sleep(quiet)
		select {
		case <-released:
			t.Fatal("OnRelease ran with one hold left")
		default:
		}
		r2()
		wait(t, released, "OnRelease after the last hold")
		barrier(t, p)
		if err := isOpen(fd); err != unix.EBADF {
			t.Errorf("owned fd after release: %v, want EBADF", err)
		}
	})
}
