//go:build linux

package poller_test

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gracepoll/gracepoll/poller"
)

// TestDeleteStopsTimersAndCancels checks that Delete cancels the work tied
// to a registration instead of waiting for it: a registration with a retry
// timer 10 minutes out is released within milliseconds of Delete, and its
// context is cancelled when Delete returns.
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

// TestTimers checks that timers run on a waiter, never concurrently with OnEvent, and a stopped
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
