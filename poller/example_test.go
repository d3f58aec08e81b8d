//go:build linux

package poller_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

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
	_, err := poller.New(poller.Options{Reclaimer: poller.PassBuckClassic})
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
