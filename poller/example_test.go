//go:build linux

package poller_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gracepoll/gracepoll/poller"
)

// A pipe's read end, watched by a poller that owns it: the handler reads
// what was written and deletes the registration; OnRelease runs once no
// waiter can hold an event for it, and then the poller closes the fd.
func Example() {
	p, err := poller.New(poller.Options{Waiters: 2})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer p.Close()

	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_NONBLOCK|unix.O_CLOEXEC); err != nil {
		fmt.Println(err)
		return
	}
	defer unix.Close(fds[1])

	released := make(chan poller.Released, 1)
	_, err = p.Add(poller.Registration{
		FD:      fds[0],
		Events:  poller.Readable,
		CloseFD: true,
		OnEvent: func(e poller.Event) {
			buf := make([]byte, 64)
			n, _ := unix.Read(e.FD, buf)
			fmt.Printf("read %q\n", buf[:n])
			p.Delete(e.Handle) // from inside the handler is fine
		},
		OnRelease: func(r poller.Released) { released <- r },
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	unix.Write(fds[1], []byte("hello"))
	r := <-released
	fmt.Println("released:", r.Reason)
	// Output:
	// read "hello"
	// released: deleted
}

// New validates its options: the zero value is a good default, and bad
// values get ErrInvalid with the reason.
func ExampleNew() {
	_, err := poller.New(poller.Options{Waiters: -1})
	fmt.Println(errors.Is(err, poller.ErrInvalid))

	p, err := poller.New(poller.Options{}) // GOMAXPROCS waiters, no timeout
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(p.Close())
	// Output:
	// true
	// <nil>
}

// Delete returns at once; a second Delete of the same handle is stale.
// Barrier waits until the release has run.
func ExamplePoller_Delete() {
	p, _ := poller.New(poller.Options{Waiters: 1})
	defer p.Close()
	efd, _ := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	var released atomic.Bool
	h, _ := p.Add(poller.Registration{
		FD:        efd,
		Events:    poller.Readable,
		CloseFD:   true,
		OnEvent:   func(poller.Event) {},
		OnRelease: func(poller.Released) { released.Store(true) },
	})
	fmt.Println(p.Delete(h))
	fmt.Println(errors.Is(p.Delete(h), poller.ErrStale))
	fmt.Println(p.Barrier(context.Background()), released.Load())
	// Output:
	// <nil>
	// true
	// <nil> true
}

// Close releases every live registration exactly once, then returns.
func ExamplePoller_Close() {
	p, _ := poller.New(poller.Options{Waiters: 2, Topology: poller.PerWaiter})
	efd, _ := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	p.Add(poller.Registration{
		FD:      efd,
		Events:  poller.Readable,
		CloseFD: true,
		OnEvent: func(poller.Event) {},
		OnRelease: func(r poller.Released) {
			fmt.Println("released:", r.Reason)
		},
	})
	fmt.Println(p.Close())
	_, err := p.Add(poller.Registration{FD: 0, OnEvent: func(poller.Event) {}})
	fmt.Println(errors.Is(err, poller.ErrClosed))
	// Output:
	// released: closed
	// <nil>
	// true
}

// Add registers an fd; events arrive on a waiter goroutine, one at a time
// per registration.
func ExamplePoller_Add() {
	p, _ := poller.New(poller.Options{Waiters: 2})
	defer p.Close()
	efd, _ := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	got := make(chan uint64, 1)
	_, err := p.Add(poller.Registration{
		FD:      efd,
		Events:  poller.Readable,
		CloseFD: true,
		OnEvent: func(e poller.Event) {
			var b [8]byte
			unix.Read(e.FD, b[:])
			got <- uint64(b[0])
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	unix.Write(efd, []byte{42, 0, 0, 0, 0, 0, 0, 0})
	fmt.Println(<-got)
	// Output: 42
}

// A timer runs on a waiter, never concurrently with the registration's
// OnEvent; Delete stops it, however far out it was.
func ExamplePoller_AfterFunc() {
	p, _ := poller.New(poller.Options{})
	defer p.Close()
	efd, _ := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	h, _ := p.Add(poller.Registration{FD: efd, Events: poller.Readable, CloseFD: true, OnEvent: func(poller.Event) {}})
	done := make(chan struct{})
	p.AfterFunc(h, time.Millisecond, func() { fmt.Println("retry"); close(done) })
	p.AfterFunc(h, 10*time.Minute, func() { fmt.Println("never") })
	<-done
	p.Delete(h) // stops the 10-minute timer; the release does not wait for it
	p.Barrier(context.Background())
	// Output: retry
}

// A hold keeps the fd open after Delete until the holder is done with it.
func ExamplePoller_Hold() {
	p, _ := poller.New(poller.Options{})
	defer p.Close()
	efd, _ := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	released := make(chan struct{})
	h, _ := p.Add(poller.Registration{
		FD: efd, Events: poller.Readable, CloseFD: true,
		OnEvent:   func(poller.Event) {},
		OnRelease: func(poller.Released) { close(released) },
	})
	unhold, _ := p.Hold(h)
	p.Delete(h)                                     // returns at once
	unix.Write(efd, []byte{1, 0, 0, 0, 0, 0, 0, 0}) // still our fd: held
	fmt.Println("wrote while held")
	unhold()
	<-released
	fmt.Println("released")
	// Output:
	// wrote while held
	// released
}

// Stats renders per-waiter statistics as a table.
func ExamplePoller_Stats() {
	p, _ := poller.New(poller.Options{Waiters: 2, Topology: poller.PerWaiter})
	defer p.Close()
	p.ResetStats()
	fmt.Print(p.Stats())
}
