package poller_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/gracepoll/gracepoll/passbuck"
	"github.com/gracepoll/gracepoll/poller"
	"github.com/gracepoll/gracepoll/reclaim/epoch"
)

// These examples compile on every system; they run on Linux, and elsewhere
// New returns ErrUnsupported.

// pipe returns an os.Pipe and the descriptor number of its read end, which
// is what a Registration takes. SyscallConn().Control reads the number
// without switching the file to blocking mode, as (*os.File).Fd would, so
// the file stays usable through its own methods. The file stays the
// caller's (CloseFD false): close it in or after OnRelease, never before.
func pipe() (r, w *os.File, fd int, err error) {
	r, w, err = os.Pipe()
	if err != nil {
		return nil, nil, -1, err
	}
	rc, err := r.SyscallConn()
	if err == nil {
		err = rc.Control(func(s uintptr) { fd = int(s) })
	}
	if err != nil {
		r.Close()
		w.Close()
		return nil, nil, -1, err
	}
	return r, w, fd, nil
}

// A pipe's read end, watched by a poller: the handler reads what was
// written and deletes the registration; OnRelease runs once no waiter can
// hold an event for it, and closes the file.
func Example() {
	p, err := poller.New(poller.Options{Waiters: 2})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer p.Close()

	r, w, fd, err := pipe()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer w.Close()

	released := make(chan poller.Released, 1)
	_, err = p.Add(poller.Registration{
		FD:     fd,
		Events: poller.Readable,
		OnEvent: func(e poller.Event) {
			buf := make([]byte, 64)
			n, _ := r.Read(buf)
			fmt.Printf("read %q\n", buf[:n])
			p.Delete(e.Handle) // from inside the handler is fine
		},
		OnRelease: func(rel poller.Released) {
			r.Close() // no handler can use it any more
			released <- rel
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	w.Write([]byte("hello"))
	rel := <-released
	fmt.Println("released:", rel.Reason)
	// Output:
	// read "hello"
	// released: deleted
}

// New validates its options: the zero value is a good default, and bad
// values get ErrInvalid with the reason. Off Linux it returns
// ErrUnsupported.
func ExampleNew() {
	_, err := poller.New(poller.Options{Waiters: -1})
	fmt.Println(errors.Is(err, poller.ErrInvalid))

	p, err := poller.New(poller.Options{}) // GOMAXPROCS waiters, no timeout
	if errors.Is(err, poller.ErrUnsupported) {
		fmt.Println("no epoll on this system")
		return
	}
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(p.Close())
	// Output:
	// true
	// <nil>
}

// Add registers an fd; events arrive on a waiter goroutine, one at a time
// per registration.
func ExamplePoller_Add() {
	p, err := poller.New(poller.Options{Waiters: 2})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer p.Close()
	r, w, fd, err := pipe()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer w.Close()
	done := make(chan struct{})
	_, err = p.Add(poller.Registration{
		FD:     fd,
		Events: poller.Readable,
		OnEvent: func(e poller.Event) {
			if e.Events&poller.HangUp != 0 {
				// The final event: the writer closed (the deferred
				// w.Close), and the poller releases the registration
				// after this call.
				return
			}
			buf := make([]byte, 64)
			n, _ := r.Read(buf)
			fmt.Printf("read %q on one of %d waiters\n", buf[:n], p.Waiters())
			close(done)
		},
		OnRelease: func(poller.Released) { r.Close() },
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	w.Write([]byte("42"))
	<-done
	// Output: read "42" on one of 2 waiters
}

// Delete returns at once; a second Delete of the same handle is stale.
func ExamplePoller_Delete() {
	p, err := poller.New(poller.Options{Waiters: 1})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer p.Close()
	r, w, fd, err := pipe()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer w.Close()
	h, err := p.Add(poller.Registration{
		FD:        fd,
		Events:    poller.Readable,
		OnEvent:   func(poller.Event) {},
		OnRelease: func(poller.Released) { r.Close() },
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(p.Delete(h))
	fmt.Println(errors.Is(p.Delete(h), poller.ErrStale))
	// Output:
	// <nil>
	// true
}

// Barrier waits until every registration deleted before it was called has
// been released: OnRelease has returned (and an owned fd is closed).
func ExamplePoller_Barrier() {
	p, err := poller.New(poller.Options{Waiters: 2})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer p.Close()
	r, w, fd, err := pipe()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer w.Close()
	var released atomic.Bool
	h, err := p.Add(poller.Registration{
		FD:      fd,
		Events:  poller.Readable,
		OnEvent: func(poller.Event) {},
		OnRelease: func(poller.Released) {
			r.Close()
			released.Store(true)
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	p.Delete(h)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	fmt.Println(p.Barrier(ctx), released.Load())
	// Output: <nil> true
}

// Close releases every live registration exactly once, then returns.
func ExamplePoller_Close() {
	p, err := poller.New(poller.Options{Waiters: 2, Topology: poller.PerWaiter})
	if err != nil {
		fmt.Println(err)
		return
	}
	r, w, fd, err := pipe()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer w.Close()
	p.Add(poller.Registration{
		FD:      fd,
		Events:  poller.Readable,
		OnEvent: func(poller.Event) {},
		OnRelease: func(rel poller.Released) {
			r.Close()
			fmt.Println("released:", rel.Reason)
		},
	})
	fmt.Println(p.Close())
	_, err = p.Add(poller.Registration{FD: fd, OnEvent: func(poller.Event) {}})
	fmt.Println(errors.Is(err, poller.ErrClosed))
	// Output:
	// released: closed
	// <nil>
	// true
}

// A timer runs on a waiter, never concurrently with the registration's
// OnEvent; Delete stops it, however far out it was.
func ExamplePoller_AfterFunc() {
	p, err := poller.New(poller.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer p.Close()
	r, w, fd, err := pipe()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer w.Close()
	h, err := p.Add(poller.Registration{FD: fd, Events: poller.Readable,
		OnEvent:   func(poller.Event) {},
		OnRelease: func(poller.Released) { r.Close() }})
	if err != nil {
		fmt.Println(err)
		return
	}
	done := make(chan struct{})
	p.AfterFunc(h, time.Millisecond, func() { fmt.Println("retry"); close(done) })
	p.AfterFunc(h, 10*time.Minute, func() { fmt.Println("never") })
	<-done
	p.Delete(h) // stops the 10-minute timer; the release does not wait for it
	p.Barrier(context.Background())
	// Output: retry
}

// A hold keeps a deleted registration from being released, so its fd stays
// open, until the holder is done with it: here a read from another
// goroutine after Delete.
func ExamplePoller_Hold() {
	p, err := poller.New(poller.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer p.Close()
	r, w, fd, err := pipe()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer w.Close()
	released := make(chan struct{})
	h, err := p.Add(poller.Registration{
		FD: fd, Events: poller.Readable,
		OnEvent: func(poller.Event) {},
		OnRelease: func(poller.Released) {
			r.Close()
			close(released)
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	unhold, err := p.Hold(h)
	if err != nil {
		fmt.Println(err)
		return
	}
	p.Delete(h) // returns at once
	w.Write([]byte("late"))
	buf := make([]byte, 16)
	n, _ := r.Read(buf) // still open: held
	fmt.Printf("read %q while held\n", buf[:n])
	unhold()
	<-released
	fmt.Println("released")
	// Output:
	// read "late" while held
	// released
}

// Stats is a snapshot of every waiter's statistics and the poller's
// counters; it prints as a table.
func ExamplePoller_Stats() {
	p, err := poller.New(poller.Options{Waiters: 2, Topology: poller.PerWaiter})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer p.Close()
	p.ResetStats()
	st := p.Stats()
	fmt.Println(len(st.Waiters), st.Waiters[1].Name, st.Live, st.Added)
	// Output: 2 waiter-1 0 0
}

// Options.Reclaimer plugs in any deferred reclaimer that passes package
// reclaimtest's conformance suite: here epoch-based reclamation. The
// classic pass-the-buck scheme needs a finite WaitTimeout, which New
// checks.
func ExampleOptions_reclaimer() {
	p, err := poller.New(poller.Options{Waiters: 2, Reclaimer: epoch.Factory(epoch.Options{})})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer p.Close()
	r, w, fd, err := pipe()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer w.Close()
	released := make(chan poller.Released, 1)
	h, err := p.Add(poller.Registration{FD: fd, Events: poller.Readable,
		OnEvent: func(poller.Event) {},
		OnRelease: func(rel poller.Released) {
			r.Close()
			released <- rel
		}})
	if err != nil {
		fmt.Println(err)
		return
	}
	p.Delete(h)
	fmt.Println("released:", (<-released).Reason)

	classic := passbuck.Factory(passbuck.Options{Mode: passbuck.Classic})
	_, err = poller.New(poller.Options{Reclaimer: classic})
	fmt.Println(errors.Is(err, poller.ErrInvalid))
	q, err := poller.New(poller.Options{Reclaimer: classic, WaitTimeout: 5 * time.Millisecond})
	if err == nil {
		fmt.Println(q.Close())
	}
	// Output:
	// released: deleted
	// true
	// <nil>
}

// On a shared set a handler that blocks holds up only its own registration:
// here the first pipe's handler waits for the second's, which another
// waiter runs (a waiter started for it, if every waiter were blocked).
func ExampleOptions_shared() {
	p, err := poller.New(poller.Options{Topology: poller.Shared, Waiters: 1})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer p.Close()
	second := make(chan struct{})
	done := make(chan string, 1)
	add := func(onEvent func()) (*os.File, error) {
		r, w, fd, err := pipe()
		if err != nil {
			return nil, err
		}
		var once atomic.Bool
		_, err = p.Add(poller.Registration{FD: fd, Events: poller.Readable,
			OnEvent: func(poller.Event) {
				if once.CompareAndSwap(false, true) {
					onEvent()
				}
			},
			OnRelease: func(poller.Released) { r.Close(); w.Close() }})
		return w, err
	}
	w1, err := add(func() {
		select {
		case <-second: // a blocking call: a lock, a disk read, another service
			done <- "the second ran while the first blocked"
		case <-time.After(10 * time.Second):
			done <- "the second waited for the first"
		}
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	w2, err := add(func() { close(second) })
	if err != nil {
		fmt.Println(err)
		return
	}
	w1.Write([]byte("1"))
	time.Sleep(time.Millisecond) // the first handler is running
	w2.Write([]byte("2"))
	fmt.Println(<-done)
	fmt.Println("extra waiters started:", p.Stats().Grown)
	// Output:
	// the second ran while the first blocked
	// extra waiters started: 1
}
