//go:build linux

package poller_test

import (
	"bytes"
	"context"
	"errors"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	"github.com/gracepoll/gracepoll/poller"
)

// TestBarrier checks Barrier: it waits for releases, refuses to wait for
// the calling callback, honours its context, and fails after Close.
func TestBarrier(t *testing.T) {
	forEachConfig(t, func(t *testing.T, opts poller.Options) {
		t.Run("WaitsForRelease", func(t *testing.T) {
			p := newPoller(t, opts)
			for range 10 {
				fd := newEventfd(t)
				var returned atomic.Bool
				h, err := p.Add(poller.Registration{
					FD: fd, Events: poller.Readable, CloseFD: true,
					OnEvent: func(poller.Event) {},
					OnRelease: func(poller.Released) {
						time.Sleep(2 * time.Millisecond)
						returned.Store(true)
					},
				})
				if err != nil {
					t.Fatal(err)
				}
				if err := p.Delete(h); err != nil {
					t.Fatal(err)
				}
				barrier(t, p)
				if !returned.Load() {
					t.Fatal("Barrier returned before OnRelease of an earlier Delete had returned")
				}
				if err := isOpen(fd); err != unix.EBADF {
					t.Fatalf("owned fd after Barrier: fcntl = %v, want EBADF", err)
				}
			}
		})

		t.Run("InOnEvent", func(t *testing.T) {
			p := newPoller(t, opts)
			fd := newEventfd(t)
			got := make(chan error, 1)
			_, err := p.Add(poller.Registration{
				FD: fd, Events: poller.Readable, CloseFD: true,
				OnEvent: func(e poller.Event) {
					readEventfd(e.FD)
					ctx, cancel := context.WithTimeout(context.Background(), timeout)
					defer cancel()
					select {
					case got <- p.Barrier(ctx):
					default:
					}
				},
			})
			if err != nil {
				t.Fatal(err)
			}
			writeEventfd(t, fd, 1)
			if err := wait(t, got, "Barrier in OnEvent"); !errors.Is(err, poller.ErrInCallback) {
				t.Errorf("Barrier in OnEvent = %v, want ErrInCallback", err)
			}
		})

		t.Run("InOnRelease", func(t *testing.T) {
			p := newPoller(t, opts)
			for range 5 { // OnRelease runs on waiters and on other goroutines
				fd := newEventfd(t)
				got := make(chan error, 1)
				h, err := p.Add(poller.Registration{
					FD: fd, Events: poller.Readable, CloseFD: true,
					OnEvent: func(poller.Event) {},
					OnRelease: func(poller.Released) {
						ctx, cancel := context.WithTimeout(context.Background(), timeout)
						defer cancel()
						got <- p.Barrier(ctx)
					},
				})
				if err != nil {
					t.Fatal(err)
				}
				if err := p.Delete(h); err != nil {
					t.Fatal(err)
				}
				if err := wait(t, got, "Barrier in OnRelease"); !errors.Is(err, poller.ErrInCallback) {
					t.Errorf("Barrier in OnRelease = %v, want ErrInCallback", err)
				}
			}
		})

		t.Run("ContextWhenStuck", func(t *testing.T) { testBarrierStuck(t, opts) })

		t.Run("AfterClose", func(t *testing.T) {
			p := newPoller(t, opts)
			if err := closeWithin(t, p); err != nil {
				t.Fatal(err)
			}
			if err := p.Barrier(context.Background()); !errors.Is(err, poller.ErrClosed) {
				t.Errorf("Barrier after Close = %v, want ErrClosed", err)
			}
		})
	})
}

// testBarrierStuck blocks a waiter inside OnEvent and deletes another
// registration. On per-waiter sets (or with Overrun off) no grace period
// can complete: the release cannot run, and Barrier returns its context's
// error until the waiter goes on. On a shared set (Shared, Stealing) the
// monitor detaches the stuck waiter after Overrun, and the release runs
// while the handler is still blocked. Either way the blocked handler's own
// registration, deleted too, is not released under it: its release waits
// for the running bit, and Barrier waits for that release.
func testBarrierStuck(t *testing.T, opts poller.Options) {
	p := newPoller(t, opts)
	blocked, unblock := blockWaiter(t, p, poller.Registration{})
	detaches := opts.Topology != poller.PerWaiter && opts.Overrun >= 0
	if detaches && opts.WaitTimeout != 0 {
		// Classic pass-the-buck needs every waiter to quiesce itself:
		// the detached waiter's Offline (a Quiesce there) lets through
		// only what happens to be parked on it, so which releases run
		// before the handler returns depends on timing. Only the end
		// is certain.
		unblock()
		barrier(t, p)
		return
	}

	fd := newEventfd(t)
	var released atomic.Bool
	h, err := p.Add(poller.Registration{
		FD: fd, Events: poller.Readable, CloseFD: true,
		OnEvent:   func(poller.Event) {},
		OnRelease: func(poller.Released) { released.Store(true) },
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Delete(h); err != nil {
		t.Fatal(err)
	}
	if detaches {
		// Detached, the stuck waiter holds back no other release.
		barrier(t, p)
		if !released.Load() {
			t.Error("Barrier returned nil before OnRelease ran")
		}
		if err := p.Delete(blocked); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), quiet)
		defer cancel()
		if err := p.Barrier(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Barrier with a deadline while the deleted registration's handler is stuck = %v, want context.DeadlineExceeded", err)
		}
		if st := p.Stats(); st.Releases != 1 || st.ReleasedNotFree != 1 {
			t.Errorf("while the deleted registration's handler is stuck: %d releases, %d released not free; want 1 and 1", st.Releases, st.ReleasedNotFree)
		}
		unblock()
		barrier(t, p)
		if st := p.Stats(); st.Releases != 2 || st.ReleasedNotFree != 0 {
			t.Errorf("once the handler returned: %d releases, %d released not free; want 2 and 0", st.Releases, st.ReleasedNotFree)
		}
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := p.Barrier(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Barrier with a cancelled context while a waiter is stuck = %v, want context.Canceled", err)
	}
	ctx, cancel = context.WithTimeout(context.Background(), quiet)
	defer cancel()
	if err := p.Barrier(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Barrier with a deadline while a waiter is stuck = %v, want context.DeadlineExceeded", err)
	}
	if released.Load() {
		t.Error("OnRelease ran while a waiter was still inside OnEvent, holding a batch from before the Delete")
	}
	unblock()
	barrier(t, p)
	if !released.Load() {
		t.Error("Barrier returned nil before OnRelease ran")
	}
}

// relRecord collects OnRelease calls.
type relRecord struct {
	mu  sync.Mutex
	got map[poller.Handle][]poller.Reason
}

func (r *relRecord) onRelease(rel poller.Released) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.got == nil {
		r.got = make(map[poller.Handle][]poller.Reason)
	}
	r.got[rel.Handle] = append(r.got[rel.Handle], rel.Reason)
}

// TestClose checks Close: every waiter joined, every registration released
// once (live ones with Reason Closed, pending ones with theirs), owned fds
// closed and others not, idempotent, callable from callbacks.
func TestClose(t *testing.T) {
	forEachConfig(t, func(t *testing.T, opts poller.Options) {
		t.Run("ReleasesEverything", func(t *testing.T) { testCloseReleases(t, opts) })

		t.Run("Idempotent", func(t *testing.T) {
			checkFDLeak(t)
			p, err := poller.New(opts)
			if err != nil {
				t.Fatal(err)
			}
			errs := make(chan error, 4)
			for range 4 {
				go func() { errs <- p.Close() }()
			}
			for range 4 {
				if err := wait(t, errs, "concurrent Close"); err != nil {
					t.Errorf("concurrent Close = %v", err)
				}
			}
			if err := closeWithin(t, p); err != nil {
				t.Errorf("Close again = %v", err)
			}
			select {
			case <-p.Done():
			default:
				t.Error("Done not closed after Close")
			}
		})

		t.Run("FromOnEvent", func(t *testing.T) {
			checkFDLeak(t)
			p, err := poller.New(opts)
			if err != nil {
				t.Fatal(err)
			}
			fd := newEventfd(t)
			ret := make(chan error, 1)
			var rec relRecord
			h, err := p.Add(poller.Registration{
				FD: fd, Events: poller.Readable, CloseFD: true,
				OnEvent: func(e poller.Event) {
					readEventfd(e.FD)
					select {
					case ret <- p.Close():
					default:
					}
				},
				OnRelease: rec.onRelease,
			})
			if err != nil {
				t.Fatal(err)
			}
			writeEventfd(t, fd, 1)
			if err := wait(t, ret, "Close from OnEvent to return"); err != nil {
				t.Errorf("Close from OnEvent = %v", err)
			}
			wait(t, p.Done(), "Done after Close from OnEvent")
			if err := closeWithin(t, p); err != nil {
				t.Errorf("Close after Done = %v", err)
			}
			checkReleased(t, &rec, map[poller.Handle]poller.Reason{h: poller.Closed})
		})

		t.Run("FromOnRelease", func(t *testing.T) {
			checkFDLeak(t)
			p, err := poller.New(opts)
			if err != nil {
				t.Fatal(err)
			}
			var rec relRecord
			ret := make(chan error, 1)
			fd := newEventfd(t)
			h, err := p.Add(poller.Registration{
				FD: fd, Events: poller.Readable, CloseFD: true,
				OnEvent: func(poller.Event) {},
				OnRelease: func(r poller.Released) {
					rec.onRelease(r)
					ret <- p.Close()
				},
			})
			if err != nil {
				t.Fatal(err)
			}
			other := newEventfd(t)
			h2, err := p.Add(poller.Registration{FD: other, Events: poller.Readable, CloseFD: true,
				OnEvent: func(poller.Event) {}, OnRelease: rec.onRelease})
			if err != nil {
				t.Fatal(err)
			}
			if err := p.Delete(h); err != nil {
				t.Fatal(err)
			}
			if err := wait(t, ret, "Close from OnRelease to return"); err != nil {
				t.Errorf("Close from OnRelease = %v", err)
			}
			wait(t, p.Done(), "Done after Close from OnRelease")
			checkReleased(t, &rec, map[poller.Handle]poller.Reason{h: poller.Deleted, h2: poller.Closed})
		})

		t.Run("FromOnReleaseAtClose", func(t *testing.T) {
			// OnRelease run by Close itself calls Close again.
			checkFDLeak(t)
			p, err := poller.New(opts)
			if err != nil {
				t.Fatal(err)
			}
			ret := make(chan error, 1)
			fd := newEventfd(t)
			if _, err := p.Add(poller.Registration{
				FD: fd, Events: poller.Readable, CloseFD: true,
				OnEvent:   func(poller.Event) {},
				OnRelease: func(poller.Released) { ret <- p.Close() },
			}); err != nil {
				t.Fatal(err)
			}
			closed := make(chan error, 1)
			go func() { closed <- p.Close() }()
			if err := wait(t, ret, "nested Close"); err != nil {
				t.Errorf("Close from OnRelease during Close = %v", err)
			}
			if err := wait(t, closed, "Close"); err != nil {
				t.Errorf("Close = %v", err)
			}
		})

		t.Run("AfterClose", func(t *testing.T) {
			p := newPoller(t, opts)
			fd := newEventfd(t)
			defer unix.Close(fd)
			h, err := p.Add(poller.Registration{FD: fd, Events: poller.Readable, OnEvent: func(poller.Event) {}})
			if err != nil {
				t.Fatal(err)
			}
			if err := closeWithin(t, p); err != nil {
				t.Fatal(err)
			}
			if _, err := p.Add(poller.Registration{FD: fd, Events: poller.Readable, OnEvent: func(poller.Event) {}}); !errors.Is(err, poller.ErrClosed) {
				t.Errorf("Add after Close = %v, want ErrClosed", err)
			}
			if err := p.Modify(h, poller.Writable); !errors.Is(err, poller.ErrClosed) {
				t.Errorf("Modify after Close = %v, want ErrClosed", err)
			}
			if err := p.Delete(h); !errors.Is(err, poller.ErrClosed) {
				t.Errorf("Delete after Close = %v, want ErrClosed", err)
			}
		})
	})

	// Waiters blocked in epoll_wait with no timeout are woken for Close.
	for _, c := range []struct {
		name string
		opts poller.Options
	}{
		{"shared", poller.Options{Topology: poller.Shared}},
		{"per-waiter", poller.Options{}},
		{"per-waiter/epoch/8", poller.Options{Waiters: 8, Reclaimer: epochQSBR.factory()}},
	} {
		opts := c.opts
		t.Run("WakesIdleWaiters/"+c.name, func(t *testing.T) {
			checkFDLeak(t)
			before := goleak.IgnoreCurrent()
			p, err := poller.New(opts)
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(quiet) // let every waiter block
			start := time.Now()
			closed := make(chan error, 1)
			go func() { closed <- p.Close() }()
			if err := wait(t, closed, "Close with idle waiters"); err != nil {
				t.Fatal(err)
			}
			t.Logf("Close took %v", time.Since(start))
			goleak.VerifyNone(t, before)
		})
	}
}

func checkReleased(t *testing.T, rec *relRecord, want map[poller.Handle]poller.Reason) {
	t.Helper()
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for h, reason := range want {
		got := rec.got[h]
		if len(got) != 1 || got[0] != reason {
			t.Errorf("releases of %v: %v, want exactly one, %v", h, got, reason)
		}
	}
	for h, got := range rec.got {
		if _, ok := want[h]; !ok {
			t.Errorf("unexpected release of %v: %v", h, got)
		}
	}
}

// testCloseReleases closes a poller with live registrations (owned fds and
// not) and pending ones (deleted while a waiter is held inside OnEvent, so
// no grace period could complete), and checks that each is released
// exactly once, that every waiter and reclaimer goroutine is gone, and
// which fds are closed.
func testCloseReleases(t *testing.T, opts poller.Options) {
	// No monitor: on a shared set it would detach the held waiter after
	// Overrun, and the deletes below would be released before Close.
	opts.Overrun = -1
	checkFDLeak(t)
	before := goleak.IgnoreCurrent()
	p, err := poller.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	var rec relRecord
	want := map[poller.Handle]poller.Reason{}

	// A waiter held inside OnEvent keeps the deletes below pending.
	hb, unblock := blockWaiter(t, p, poller.Registration{OnRelease: rec.onRelease})
	want[hb] = poller.Closed

	var owned, mine []int
	for i := range 8 {
		fd := newEventfd(t)
		reg := poller.Registration{FD: fd, Events: poller.Readable, OnEvent: func(poller.Event) {}, OnRelease: rec.onRelease}
		if i%2 == 0 {
			reg.CloseFD = true
			owned = append(owned, fd)
		} else {
			mine = append(mine, fd)
		}
		h, err := p.Add(reg)
		if err != nil {
			t.Fatal(err)
		}
		if i < 4 {
			if err := p.Delete(h); err != nil {
				t.Fatal(err)
			}
			want[h] = poller.Deleted
		} else {
			want[h] = poller.Closed
		}
	}
	rec.mu.Lock()
	early := len(rec.got)
	rec.mu.Unlock()
	if early != 0 {
		t.Errorf("%d releases ran while a waiter was held in OnEvent", early)
	}
	if st := p.Stats(); st.ReleasedNotFree != 4 || st.Live != 5 {
		t.Errorf("before Close: Live %d ReleasedNotFree %d, want 5 and 4", st.Live, st.ReleasedNotFree)
	}

	closed := make(chan error, 1)
	go func() { closed <- p.Close() }()
	time.Sleep(time.Millisecond)
	unblock()
	if err := wait(t, closed, "Close"); err != nil {
		t.Fatal(err)
	}
	checkReleased(t, &rec, want)
	if st := p.Stats(); st.Added != 9 || st.Deleted != 9 || st.Releases != 9 || st.Live != 0 || st.ReleasedNotFree != 0 {
		t.Errorf("after Close: %+v", st)
	}
	goleak.VerifyNone(t, before)
	for _, fd := range owned {
		if err := isOpen(fd); err != unix.EBADF {
			t.Errorf("owned fd %d after Close: fcntl = %v, want EBADF", fd, err)
		}
	}
	for _, fd := range mine {
		if err := isOpen(fd); err != nil {
			t.Errorf("fd %d not owned by the poller closed: %v", fd, err)
		}
		unix.Close(fd)
	}
}

// TestIdleReleaseLatency checks that with no epoll_wait timeout and every
// waiter idle, a release completes (it would wait forever if a blocked
// waiter had to pass the buck).
func TestIdleReleaseLatency(t *testing.T) {
	for _, topo := range topologies {
		for _, rk := range []reclaimerKind{passBuck, epochQSBR} {
			t.Run(topo.String()+"/"+rk.String(), func(t *testing.T) {
				p := newPoller(t, poller.Options{Waiters: 3, Topology: topo, Reclaimer: rk.factory()})
				var lat []time.Duration
				for range 5 {
					fd := newEventfd(t)
					done := make(chan time.Time, 1)
					h, err := p.Add(poller.Registration{
						FD: fd, Events: poller.Readable, CloseFD: true,
						OnEvent:   func(poller.Event) {},
						OnRelease: func(poller.Released) { done <- time.Now() },
					})
					if err != nil {
						t.Fatal(err)
					}
					time.Sleep(5 * time.Millisecond) // every waiter blocked in epoll_wait
					start := time.Now()
					if err := p.Delete(h); err != nil {
						t.Fatal(err)
					}
					select {
					case at := <-done:
						lat = append(lat, at.Sub(start))
					case <-time.After(time.Second):
						t.Fatal("release with idle waiters did not complete within 1s")
					}
				}
				t.Logf("idle release latencies: %v", lat)
			})
		}
	}
	t.Run("ClassicNeedsTimeout", func(t *testing.T) {
		_, err := poller.New(poller.Options{Reclaimer: passBuckClassic.factory()})
		if !errors.Is(err, poller.ErrInvalid) || !strings.Contains(err.Error(), "WaitTimeout") {
			t.Errorf("New(classic, no timeout) = %v, want ErrInvalid mentioning WaitTimeout", err)
		}
	})
}

// onWaiterStack reports whether the caller runs on a waiter goroutine (its
// stack holds the waiter loop) rather than on a reclaimer's own goroutine.
func onWaiterStack() bool {
	buf := make([]byte, 16<<10)
	return bytes.Contains(buf[:runtime.Stack(buf, false)], []byte("poller.(*Poller).run("))
}

// releasePath drives releases down one of the two paths a reclaimer runs
// them on: with every waiter busy in OnEvent (online), the grace period
// ends at a waiter's quiescent point and that waiter runs the release; with
// every waiter blocked in epoll_wait (offline), the reclaimer's own
// goroutine runs it.
type releasePath struct {
	spinners []int
}

// newReleasePath registers one never-drained eventfd per waiter, which
// keeps the waiters busy while readable.
func newReleasePath(t *testing.T, p *poller.Poller, topo poller.Topology) *releasePath {
	t.Helper()
	rp := &releasePath{}
	for i := range p.Waiters() {
		fd := newEventfd(t)
		reg := poller.Registration{FD: fd, Events: poller.Readable, CloseFD: true,
			OnEvent: func(poller.Event) { time.Sleep(20 * time.Microsecond) }}
		if topo == poller.PerWaiter {
			reg.Waiter = poller.OnWaiter(i)
		}
		if _, err := p.Add(reg); err != nil {
			t.Fatal(err)
		}
		rp.spinners = append(rp.spinners, fd)
	}
	return rp
}

// set makes the waiters busy or idle.
func (rp *releasePath) set(t *testing.T, busy bool) {
	for _, fd := range rp.spinners {
		if busy {
			writeEventfd(t, fd, 1)
		} else {
			readEventfd(fd)
		}
	}
	time.Sleep(2 * time.Millisecond) // the waiters start spinning, or block
}

// TestCallbackOnEveryReleasePath calls Barrier and Close from OnRelease
// run by a waiter and run by the reclaimer's own goroutine, for both
// reclaimers that have such a goroutine: Barrier returns ErrInCallback and
// Close returns at once, on either path, instead of waiting for themselves.
func TestCallbackOnEveryReleasePath(t *testing.T) {
	const attempts = 100
	path := map[bool]string{true: "a waiter", false: "the reclaimer's goroutine"}
	for _, topo := range topologies {
		for _, rk := range []reclaimerKind{passBuck, epochQSBR} {
			opts := optsFor(topo, rk, 2)
			t.Run(topo.String()+"/"+rk.String()+"/Barrier", func(t *testing.T) {
				p := newPoller(t, opts)
				rp := newReleasePath(t, p, topo)
				seen := map[bool]int{}
				for i := 0; i < attempts && (seen[true] < 2 || seen[false] < 2); i++ {
					rp.set(t, i%2 == 0)
					type result struct {
						onWaiter bool
						err      error
					}
					got := make(chan result, 1)
					h, err := p.Add(poller.Registration{FD: newEventfd(t), Events: poller.Readable, CloseFD: true, OnEvent: nop,
						OnRelease: func(poller.Released) {
							ctx, cancel := context.WithTimeout(context.Background(), timeout)
							defer cancel()
							got <- result{onWaiterStack(), p.Barrier(ctx)}
						}})
					if err != nil {
						t.Fatal(err)
					}
					if err := p.Delete(h); err != nil {
						t.Fatal(err)
					}
					r := wait(t, got, "Barrier in OnRelease")
					if !errors.Is(r.err, poller.ErrInCallback) {
						t.Errorf("Barrier in OnRelease run by %s = %v, want ErrInCallback", path[r.onWaiter], r.err)
					}
					seen[r.onWaiter]++
				}
				rp.set(t, false)
				t.Logf("OnRelease ran %d times on a waiter, %d on the reclaimer's goroutine", seen[true], seen[false])
				for _, w := range []bool{true, false} {
					if seen[w] == 0 {
						t.Errorf("in %d attempts no OnRelease ran on %s: that path is untested", attempts, path[w])
					}
				}
			})
			t.Run(topo.String()+"/"+rk.String()+"/Close", func(t *testing.T) {
				for _, onWaiter := range []bool{true, false} {
					var i int
					for i = 0; i < attempts; i++ {
						p := newPoller(t, opts)
						rp := newReleasePath(t, p, topo)
						rp.set(t, onWaiter)
						type result struct {
							onWaiter bool
							err      error
						}
						got := make(chan result, 1)
						h, err := p.Add(poller.Registration{FD: newEventfd(t), Events: poller.Readable, CloseFD: true, OnEvent: nop,
							OnRelease: func(r poller.Released) {
								if r.Reason == poller.Deleted {
									got <- result{onWaiterStack(), p.Close()}
								}
							}})
						if err != nil {
							t.Fatal(err)
						}
						if err := p.Delete(h); err != nil {
							t.Fatal(err)
						}
						r := wait(t, got, "Close from OnRelease to return")
						if r.err != nil {
							t.Errorf("Close in OnRelease run by %s = %v", path[r.onWaiter], r.err)
						}
						wait(t, p.Done(), "Done after Close from OnRelease")
						if r.onWaiter == onWaiter {
							break
						}
					}
					if i == attempts {
						t.Errorf("in %d attempts no OnRelease ran on %s: that path is untested", attempts, path[onWaiter])
					}
				}
			})
		}
	}
}

// TestBarrierBesideRelease calls Barrier from an ordinary goroutine while
// an OnRelease of the same poller is running: it is not inside a callback,
// so it waits for that release and returns nil.
func TestBarrierBesideRelease(t *testing.T) {
	forEachConfig(t, func(t *testing.T, opts poller.Options) {
		p := newPoller(t, opts)
		started := make(chan struct{})
		proceed := make(chan struct{})
		h, err := p.Add(poller.Registration{FD: newEventfd(t), Events: poller.Readable, CloseFD: true, OnEvent: nop,
			OnRelease: func(poller.Released) {
				close(started)
				select {
				case <-proceed:
				case <-time.After(timeout):
				}
			}})
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Delete(h); err != nil {
			t.Fatal(err)
		}
		wait(t, started, "OnRelease")
		errc := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			errc <- p.Barrier(ctx)
		}()
		select {
		case err := <-errc:
			t.Fatalf("Barrier beside a running OnRelease returned %v before that release finished; want it to wait, then nil", err)
		case <-time.After(quiet):
		}
		close(proceed)
		if err := wait(t, errc, "Barrier after the release"); err != nil {
			t.Errorf("Barrier from an ordinary goroutine beside a release = %v, want nil", err)
		}
		barrier(t, p) // and from the test's goroutine
	})
}

// InCallback is true in OnEvent and OnRelease, false elsewhere, also in
// another poller's callback (a different waiter).
func TestInCallback(t *testing.T) {
	p := newPoller(t, poller.Options{Waiters: 2})
	other := newPoller(t, poller.Options{Waiters: 1})
	if p.InCallback() {
		t.Error("InCallback outside every callback")
	}
	efd := newEventfd(t)
	type seen struct{ own, other bool }
	inEvent, inRelease := make(chan seen, 1), make(chan seen, 1)
	h, err := p.Add(poller.Registration{
		FD: efd, Events: poller.Readable, CloseFD: true,
		OnEvent: func(e poller.Event) {
			readEventfd(e.FD)
			select {
			case inEvent <- seen{p.InCallback(), other.InCallback()}:
			default:
			}
		},
		OnRelease: func(poller.Released) { inRelease <- seen{p.InCallback(), other.InCallback()} },
	})
	if err != nil {
		t.Fatal(err)
	}
	writeEventfd(t, efd, 1)
	if s := wait(t, inEvent, "OnEvent"); !s.own || s.other {
		t.Errorf("in OnEvent: InCallback = %v, other poller's = %v; want true, false", s.own, s.other)
	}
	if err := p.Delete(h); err != nil {
		t.Fatal(err)
	}
	if s := wait(t, inRelease, "OnRelease"); !s.own {
		t.Errorf("in OnRelease: InCallback = %v, want true", s.own)
	}
	barrier(t, p)
}
