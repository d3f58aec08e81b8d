//go:build linux

package poller_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gracepoll/gracepoll/poller"
)

// Lifecycle lessons of two transports: release vs remove with waiter
// statistics readable in the disconnect path (the OVIS LDMS Zap transport),
// and a bounded, cancelling destroy (the OpenFabrics IBAL connection
// manager).

// In the final hang-up event and in OnRelease the registration's waiter,
// that waiter's statistics and the registration's own counters are
// readable; Info works until the release begins.
func TestStatsReadableInDisconnectPath(t *testing.T) {
	forEachConfig(t, func(t *testing.T, opts poller.Options) {
		p := newPoller(t, opts)
		a, b := newSocketpair(t)
		defer unix.Close(b)
		type seen struct {
			info poller.Info
			ws   poller.WaiterStats
			err  error
			ev   poller.Event
		}
		type released struct {
			poller.Released
			ws poller.WaiterStats
		}
		final := make(chan seen, 1)
		rel := make(chan released, 1)
		var h poller.Handle
		var err error
		h, err = p.Add(poller.Registration{
			FD: a, Events: poller.Readable, CloseFD: true,
			OnEvent: func(e poller.Event) {
				buf := make([]byte, 64)
				n, _ := unix.Read(e.FD, buf)
				if n > 0 {
					p.CountBytes(e.Handle, n, 0)
				}
				if e.Events&(poller.HangUp|poller.Error) != 0 {
					in, err := p.Info(e.Handle)
					ws, _ := p.WaiterStats(in.Waiter)
					final <- seen{in, ws, err, e}
				}
			},
			OnRelease: func(r poller.Released) {
				ws, _ := p.WaiterStats(r.Waiter)
				rel <- released{r, ws}
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		in, err := p.Info(h)
		if err != nil || !in.Registered || in.FD != a {
			t.Fatalf("Info of a live registration = %+v, %v", in, err)
		}
		unix.Write(b, []byte("hello"))
		eventually(t, "bytes counted", func() bool {
			in, err := p.Info(h)
			return err == nil && in.Registration.BytesIn == 5
		})
		unix.Close(b) // the peer hangs up: a's final event
		f := wait(t, final, "final hang-up event")
		if f.err != nil {
			t.Fatalf("Info in the final event: %v", f.err)
		}
		if f.info.Registered {
			t.Error("Info in the final event: still registered; it must leave epoll before its final event")
		}
		if f.info.Waiter != f.ev.Waiter || f.ws.Index != f.ev.Waiter || f.ws.Name == "" {
			t.Errorf("Info in the final event names waiter %d (stats of %d %q), event on waiter %d",
				f.info.Waiter, f.ws.Index, f.ws.Name, f.ev.Waiter)
		}
		if f.info.Registration.BytesIn != 5 || f.info.Registration.Events < 2 {
			t.Errorf("Info in the final event: counters %+v, want 5 bytes in and at least 2 events", f.info.Registration)
		}
		if opts.Topology == poller.PerWaiter && (!f.info.Attached || f.ws.Attached < 1) {
			t.Errorf("per-waiter: in the final event the registration is detached already: %+v", f.info)
		}
		r := wait(t, rel, "release")
		if r.Reason != poller.HungUp || r.Waiter != f.ev.Waiter || r.ws.Index != r.Waiter {
			t.Errorf("released %+v, want HungUp on waiter %d with its stats", basicRelease(r.Released), f.ev.Waiter)
		}
		if r.Registration.BytesIn != 5 || r.Registration.Events != f.info.Registration.Events {
			t.Errorf("released counters %+v, want 5 bytes and %d events, the final one included", r.Registration, f.info.Registration.Events)
		}
		if opts.Topology == poller.PerWaiter && r.ws.Attached < 1 {
			t.Errorf("per-waiter: OnRelease sees waiter %d with %d attached; the registration must stay attached until OnRelease returns", r.Waiter, r.ws.Attached)
		}
		barrier(t, p)
		if _, err := p.Info(h); !errors.Is(err, poller.ErrStale) {
			t.Errorf("Info after the release = %v, want ErrStale", err)
		}
		if opts.Topology == poller.PerWaiter {
			if ws, _ := p.WaiterStats(r.Waiter); ws.Attached != 0 {
				t.Errorf("after the release waiter %d has %d attached, want 0 (detached)", r.Waiter, ws.Attached)
			}
		}
	})
}

// PerWaiter assigns to the least-loaded waiter unless the caller names one.
func TestWaiterChoice(t *testing.T) {
	p := newPoller(t, poller.Options{Waiters: 3, Topology: poller.PerWaiter})
	var hs []poller.Handle
	add := func(c poller.WaiterChoice) (poller.Handle, error) {
		h, err := p.Add(poller.Registration{FD: newEventfd(t), Events: poller.Readable, CloseFD: true, OnEvent: nop, Waiter: c})
		if err == nil {
			hs = append(hs, h)
		}
		return h, err
	}
	for range 4 {
		if _, err := add(poller.OnWaiter(2)); err != nil {
			t.Fatal(err)
		}
	}
	for range 4 {
		if _, err := add(poller.LeastLoaded); err != nil {
			t.Fatal(err)
		}
	}
	want := []int64{2, 2, 4}
	for i, n := range want {
		if ws, _ := p.WaiterStats(i); ws.Attached != n {
			t.Errorf("waiter %d has %d attached, want %d", i, ws.Attached, n)
		}
	}
	for _, c := range []poller.WaiterChoice{poller.OnWaiter(3), poller.OnWaiter(-2), -1} {
		fd := newEventfd(t)
		if _, err := p.Add(poller.Registration{FD: fd, OnEvent: nop, Waiter: c}); !errors.Is(err, poller.ErrInvalid) {
			t.Errorf("Add on waiter choice %d = %v, want ErrInvalid", c, err)
		}
		unix.Close(fd)
	}
	if _, err := p.WaiterStats(3); !errors.Is(err, poller.ErrInvalid) {
		t.Errorf("WaiterStats(3) of 3 waiters = %v, want ErrInvalid", err)
	}
}

// Operations between Released and Free fail with ErrStale and change no
// counter: Zap's post-release send skewed its waiter's queue count.
func TestPostReleaseOperationsCountNothing(t *testing.T) {
	forEachConfig(t, func(t *testing.T, opts poller.Options) {
		p := newPoller(t, opts)
		hold := make(chan struct{})
		relStarted := make(chan struct{})
		h, err := p.Add(poller.Registration{
			FD: newEventfd(t), Events: poller.Readable, CloseFD: true, OnEvent: nop,
			OnRelease: func(poller.Released) { close(relStarted); <-hold },
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := p.CountBytes(h, 10, 20); err != nil {
			t.Fatal(err)
		}
		// A hold keeps the registration in Released (not Free) while we try.
		release, err := p.Hold(h)
		if err != nil {
			t.Fatal(err)
		}
		before := p.Stats()
		beforeInfo, _ := p.Info(h)
		if err := p.Delete(h); err != nil {
			t.Fatal(err)
		}
		in, err := p.Info(h)
		if err != nil || in.Registered {
			t.Fatalf("Info between Released and Free = %+v, %v; want readable, not registered", in, err)
		}
		for name, op := range map[string]func() error{
			"CountBytes": func() error { return p.CountBytes(h, 1000, 1000) },
			"Modify":     func() error { return p.Modify(h, poller.Writable) },
			"AfterFunc":  func() error { _, err := p.AfterFunc(h, time.Millisecond, func() { t.Error("timer ran") }); return err },
			"Hold":       func() error { _, err := p.Hold(h); return err },
			"Context":    func() error { _, err := p.Context(h); return err },
			"Delete":     func() error { return p.Delete(h) },
		} {
			if err := op(); !errors.Is(err, poller.ErrStale) {
				t.Errorf("%s after Delete = %v, want ErrStale", name, err)
			}
		}
		after, _ := p.Info(h)
		if after.Registration.BytesIn != 10 || after.Registration.BytesOut != 20 || after.Registration.Events != beforeInfo.Registration.Events {
			t.Errorf("counters after refused operations: %+v, want unchanged %+v", after.Registration, beforeInfo.Registration)
		}
		st := p.Stats()
		for i := range st.Waiters {
			if st.Waiters[i].Attached != before.Waiters[i].Attached {
				t.Errorf("waiter %d attached %d -> %d after refused operations", i, before.Waiters[i].Attached, st.Waiters[i].Attached)
			}
		}
		if st.Added != before.Added || st.Deleted != before.Deleted+1 {
			t.Errorf("Added %d -> %d, Deleted %d -> %d; want only the one Delete counted", before.Added, st.Added, before.Deleted, st.Deleted)
		}
		release()
		wait(t, relStarted, "OnRelease after the hold")
		close(hold)
		barrier(t, p)
	})
}

// A registration with a retry timer 10 minutes out is released within
// milliseconds of Delete; its context is cancelled at Delete.
func TestDeleteStopsTimersAndCancels(t *testing.T) {
	forEachConfig(t, func(t *testing.T, opts poller.Options) {
		p := newPoller(t, opts)
		rel := make(chan time.Time, 1)
		h, err := p.Add(poller.Registration{
			FD: newEventfd(t), Events: poller.Readable, CloseFD: true, OnEvent: nop,
			OnRelease: func(poller.Released) { rel <- time.Now() },
		})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.AfterFunc(h, 10*time.Minute, func() { t.Error("the 10-minute timer ran") }); err != nil {
			t.Fatal(err)
		}
		ctx, err := p.Context(h)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if err := p.Delete(h); err != nil {
			t.Fatal(err)
		}
		select {
		case <-ctx.Done():
		default:
			t.Error("context not cancelled when Delete returned")
		}
		end := wait(t, rel, "release with a 10-minute timer armed")
		t.Logf("released %v after Delete, with a 10-minute timer armed", end.Sub(start))
		if d := end.Sub(start); d > time.Second {
			t.Errorf("release took %v with a timer armed; it must not wait for the timer", d)
		}
	})
}

// Timers run on a waiter, never concurrently with OnEvent, and a stopped
// timer never runs.
func TestTimers(t *testing.T) {
	forEachConfig(t, func(t *testing.T, opts poller.Options) {
		p := newPoller(t, opts)
		fd := newEventfd(t)
		var inside, overlaps, events atomic.Int32
		enter := func() {
			if inside.Add(1) != 1 {
				overlaps.Add(1)
			}
			time.Sleep(50 * time.Microsecond)
			inside.Add(-1)
		}
		h, err := p.Add(poller.Registration{FD: fd, Events: poller.Readable, CloseFD: true,
			OnEvent: func(e poller.Event) { enter(); events.Add(1); readEventfd(e.FD) }})
		if err != nil {
			t.Fatal(err)
		}
		stopWrites := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stopWrites:
					return
				default:
				}
				writeEventfd(t, fd, 1)
				time.Sleep(20 * time.Microsecond)
			}
		}()
		const n = 50
		var fired atomic.Int32
		done := make(chan struct{})
		for i := range n {
			_, err := p.AfterFunc(h, time.Duration(i%5)*time.Millisecond, func() {
				enter()
				if fired.Add(1) == n {
					close(done)
				}
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		stop, err := p.AfterFunc(h, 20*time.Millisecond, func() { t.Error("a stopped timer ran") })
		if err != nil {
			t.Fatal(err)
		}
		if !stop() {
			t.Error("stop of a pending timer reported false")
		}
		if stop() {
			t.Error("second stop reported true")
		}
		wait(t, done, "all timers")
		close(stopWrites)
		wg.Wait()
		time.Sleep(30 * time.Millisecond)
		if o := overlaps.Load(); o != 0 {
			t.Errorf("%d timer/OnEvent overlaps for one registration", o)
		}
		if events.Load() == 0 {
			t.Error("no events while timers ran")
		}
		if _, err := p.AfterFunc(h, 0, nil); !errors.Is(err, poller.ErrInvalid) {
			t.Errorf("AfterFunc(nil) = %v, want ErrInvalid", err)
		}
	})
}

// Holds delay OnRelease (and closing an owned fd), never Delete.
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

// The watchdog reports a release held too long, once, naming what holds
// it, and never releases early.
func TestWatchdog(t *testing.T) {
	var buf syncBuffer
	logger := slog.New(slog.NewJSONHandler(&buf, nil))
	p := newPoller(t, poller.Options{Waiters: 2, ReleaseWatchdog: 20 * time.Millisecond, Logger: logger})
	released := make(chan struct{})
	h, err := p.Add(poller.Registration{FD: newEventfd(t), Events: poller.Readable, CloseFD: true, OnEvent: nop,
		OnRelease: func(poller.Released) { close(released) }})
	if err != nil {
		t.Fatal(err)
	}
	release, err := p.Hold(h)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Delete(h); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // many watchdog ticks
	select {
	case <-released:
		t.Fatal("released early while held")
	default:
	}
	if st := p.Stats(); st.OldestPending < 20*time.Millisecond || st.ReleasedNotFree != 1 {
		t.Errorf("Stats with a stuck release: OldestPending %v, ReleasedNotFree %d", st.OldestPending, st.ReleasedNotFree)
	}
	release()
	wait(t, released, "release after the hold")
	var reports []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		reports = append(reports, m)
	}
	if len(reports) != 1 {
		t.Fatalf("%d watchdog reports, want exactly 1:\n%s", len(reports), buf.String())
	}
	r := reports[0]
	if r["handle"] != h.String() || r["held_by"] != "holds" || r["holds"] != float64(1) || r["level"] != "WARN" {
		t.Errorf("watchdog report %v, want handle %v held by 1 hold", r, h)
	}
}

// The watchdog names the waiter that holds up a grace period.
func TestWatchdogNamesWaiter(t *testing.T) {
	var buf syncBuffer
	logger := slog.New(slog.NewJSONHandler(&buf, nil))
	p := newPoller(t, poller.Options{Waiters: 2, Topology: poller.PerWaiter, ReleaseWatchdog: 20 * time.Millisecond, Logger: logger})
	unblock := make(chan struct{})
	inHandler := make(chan struct{})
	busy := newEventfd(t)
	if _, err := p.Add(poller.Registration{FD: busy, Events: poller.Readable, CloseFD: true, Waiter: poller.OnWaiter(1),
		OnEvent: func(e poller.Event) { readEventfd(e.FD); close(inHandler); <-unblock }}); err != nil {
		t.Fatal(err)
	}
	h, err := p.Add(poller.Registration{FD: newEventfd(t), Events: poller.Readable, CloseFD: true, OnEvent: nop, Waiter: poller.OnWaiter(0)})
	if err != nil {
		t.Fatal(err)
	}
	writeEventfd(t, busy, 1)
	wait(t, inHandler, "waiter 1 stuck in a handler")
	if err := p.Delete(h); err != nil {
		t.Fatal(err)
	}
	eventually(t, "watchdog report", func() bool { return strings.Contains(buf.String(), "grace period") })
	close(unblock)
	barrier(t, p)
	var m map[string]any
	if err := json.Unmarshal([]byte(strings.Split(buf.String(), "\n")[0]), &m); err != nil {
		t.Fatal(err)
	}
	if w, ok := m["waiters"].([]any); !ok || len(w) != 1 || w[0] != float64(1) {
		t.Errorf("watchdog report %v, want waiters [1]", m)
	}
}

// Stats snapshots stay consistent under concurrent dispatch and resets.
func TestStatsConsistentUnderLoad(t *testing.T) {
	forEachConfigN(t, 2, func(t *testing.T, opts poller.Options) {
		opts.TimeHandlers = true
		p := newPoller(t, opts)
		var fds []int
		var hs []poller.Handle
		for range 8 {
			fd := newEventfd(t)
			h, err := p.Add(poller.Registration{FD: fd, Events: poller.Readable, CloseFD: true,
				OnEvent: func(e poller.Event) { readEventfd(e.FD); time.Sleep(time.Microsecond) }})
			if err != nil {
				t.Fatal(err)
			}
			fds, hs = append(fds, fd), append(hs, h)
		}
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				writeEventfd(t, fds[i%len(fds)], 1)
			}
		}()
		eventually(t, "events flowing", func() bool { return p.Stats().Events > 100 })
		var last uint64
		for i := range 200 {
			time.Sleep(50 * time.Microsecond)
			if i%50 == 0 {
				p.ResetStats()
			}
			st := p.Stats()
			var sum uint64
			for _, w := range st.Waiters {
				sum += w.Events
				if w.Utilisation < -1 || w.Utilisation > 1 || w.Waiting < 0 || w.Processing < 0 {
					t.Fatalf("waiter stats out of range: %+v", w)
				}
				if w.Utilisation >= 0 && w.Window <= 0 {
					t.Fatalf("utilisation %v with window %v", w.Utilisation, w.Window)
				}
			}
			if sum != st.Events || st.Events < last {
				t.Fatalf("Events %d (previous %d), waiters sum to %d", st.Events, last, sum)
			}
			last = st.Events
			if i == 100 && !strings.Contains(st.String(), "waiter-1") {
				t.Errorf("Stats.String() lacks the waiter rows:\n%s", st)
			}
		}
		close(stop)
		wg.Wait()
		in, err := p.Info(hs[0])
		if err != nil || in.Registration.Events == 0 || in.Registration.HandlerTime <= 0 {
			t.Errorf("Info with TimeHandlers: %+v, %v; want events and handler time", in.Registration, err)
		}
		t.Logf("\n%s", p.Stats())
	})
}

// syncBuffer is a bytes.Buffer safe for a logger and a test to share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
