//go:build linux

package poller_test

import (
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gracepoll/gracepoll/internal/testkit"
	"github.com/gracepoll/gracepoll/poller"
)

// watchdogLog is a poller's log, as JSON lines, for the watchdog tests.
type watchdogLog struct{ buf testkit.SyncBuffer }

func (l *watchdogLog) logger() *slog.Logger { return slog.New(slog.NewJSONHandler(&l.buf, nil)) }

// reports returns the watchdog's reports so far.
func (l *watchdogLog) reports(t *testing.T) []map[string]any {
	t.Helper()
	var reports []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(l.buf.String()), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if msg, _ := m["msg"].(string); strings.Contains(msg, "pending too long") {
			if !strings.Contains(msg, "never releasing early") || m["level"] != "WARN" {
				t.Errorf("watchdog report %v: want a warning that says it never releases early", m)
			}
			reports = append(reports, m)
		}
	}
	return reports
}

// TestWatchdog checks that the watchdog reports a release held too long, once, naming what holds
// it, and never releases early.
func TestWatchdog(t *testing.T) {
	var log watchdogLog
	p := newPoller(t, poller.Options{Waiters: 2, ReleaseWatchdog: 50 * time.Millisecond, Logger: log.logger()})
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
	time.Sleep(300 * time.Millisecond) // many watchdog ticks
	select {
	case <-released:
		t.Fatal("released early while held")
	default:
	}
	if st := p.Stats(); st.OldestPending < 50*time.Millisecond || st.ReleasedNotFree != 1 {
		t.Errorf("Stats with a stuck release: OldestPending %v, ReleasedNotFree %d", st.OldestPending, st.ReleasedNotFree)
	}
	release()
	wait(t, released, "release after the hold")
	reports := log.reports(t)
	if len(reports) != 1 {
		t.Fatalf("%d watchdog reports, want exactly 1:\n%s", len(reports), log.buf.String())
	}
	r := reports[0]
	if r["oldest"] != h.String() || r["held_by"] != "holds" || r["holds"] != float64(1) || r["releases"] != float64(1) {
		t.Errorf("watchdog report %v, want handle %v held by 1 hold", r, h)
	}
}

// TestWatchdogNamesWaiter checks that the watchdog names the waiter that holds up a grace period.
func TestWatchdogNamesWaiter(t *testing.T) {
	var log watchdogLog
	p := newPoller(t, poller.Options{Waiters: 2, Topology: poller.PerWaiter, ReleaseWatchdog: 20 * time.Millisecond, Logger: log.logger()})
	h, err := p.Add(poller.Registration{FD: newEventfd(t), Events: poller.Readable, CloseFD: true, OnEvent: nop, Waiter: poller.OnWaiter(0)})
	if err != nil {
		t.Fatal(err)
	}
	_, unblock := blockWaiter(t, p, poller.Registration{Waiter: poller.OnWaiter(1)})
	if err := p.Delete(h); err != nil {
		t.Fatal(err)
	}
	eventually(t, "watchdog report", func() bool { return len(log.reports(t)) > 0 })
	unblock()
	barrier(t, p)
	m := log.reports(t)[0]
	if m["held_by"] != "waiter" || m["waiter"] != float64(1) || m["releases"] != float64(1) || m["oldest"] != h.String() {
		t.Errorf("watchdog report %v, want %v held by waiter 1", m, h)
	}
}

// TestWatchdogOneLinePerWaiter checks that the releases one blocked waiter holds are one report,
// with their count, not one per release; that the cause is reported again when the count has
// doubled, and not when it grows less; and that nothing is released early.
func TestWatchdogOneLinePerWaiter(t *testing.T) {
	const n = 60
	var log watchdogLog
	// One waiter: every registration is on it, and so is every grace period.
	p := newPoller(t, poller.Options{Waiters: 1, Topology: poller.PerWaiter, ReleaseWatchdog: 50 * time.Millisecond, Logger: log.logger()})
	releasedEarly := make(chan poller.Handle, 3*n)
	hs := make([]poller.Handle, 0, 2*n+10)
	for range cap(hs) {
		h, err := p.Add(poller.Registration{FD: newEventfd(t), Events: poller.Readable, CloseFD: true, OnEvent: nop,
			OnRelease: func(r poller.Released) { releasedEarly <- r.Handle }})
		if err != nil {
			t.Fatal(err)
		}
		hs = append(hs, h)
	}
	_, unblock := blockWaiter(t, p, poller.Registration{})
	deleteAll := func(hs []poller.Handle) {
		for _, h := range hs {
			if err := p.Delete(h); err != nil {
				t.Fatal(err)
			}
		}
	}
	deleteAll(hs[:n])
	eventually(t, "a watchdog report", func() bool { return len(log.reports(t)) > 0 })
	deleteAll(hs[n : 2*n])
	eventually(t, "a second report once the count doubled", func() bool { return len(log.reports(t)) > 1 })
	deleteAll(hs[2*n:])
	time.Sleep(300 * time.Millisecond) // a dozen ticks
	select {
	case h := <-releasedEarly:
		t.Fatalf("%v released while its waiter had not passed a quiescent point", h)
	default:
	}
	reports := log.reports(t)
	unblock()
	barrier(t, p)
	if len(reports) != 2 {
		t.Fatalf("%d watchdog reports for %d releases held by one waiter, want 2 (first, doubled):\n%s", len(reports), len(hs), log.buf.String())
	}
	for i, want := range []float64{n, 2 * n} {
		r := reports[i]
		if r["held_by"] != "waiter" || r["waiter"] != float64(0) || r["releases"] != want || r["oldest"] != hs[0].String() {
			t.Errorf("report %d: %v, want %v releases held by waiter 0, oldest %v", i, r, want, hs[0])
		}
		if stuck, age := r["stuck"].(float64), r["age"].(float64); stuck < float64(25*time.Millisecond) || age < float64(50*time.Millisecond) {
			t.Errorf("report %d: stuck %v, age %v: want at least half the limit and the limit", i, time.Duration(stuck), time.Duration(age))
		}
	}
	t.Logf("log:\n%s", log.buf.String())
}

// TestWatchdogOwnHandler checks that a release held by a handler of its own registration, still
// running on a shared set, is reported as such.
func TestWatchdogOwnHandler(t *testing.T) {
	var log watchdogLog
	p := newPoller(t, poller.Options{Waiters: 2, Topology: poller.Shared, ReleaseWatchdog: 50 * time.Millisecond, Logger: log.logger()})
	h, unblock := blockWaiter(t, p, poller.Registration{})
	if err := p.Delete(h); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a watchdog report", func() bool { return len(log.reports(t)) > 0 })
	time.Sleep(200 * time.Millisecond)
	reports := log.reports(t)
	unblock()
	barrier(t, p)
	if len(reports) != 1 {
		t.Fatalf("%d watchdog reports, want 1:\n%s", len(reports), log.buf.String())
	}
	if r := reports[0]; r["held_by"] != "own handler" || r["oldest"] != h.String() || r["releases"] != float64(1) ||
		!strings.Contains(r["msg"].(string), "its own handler still running") {
		t.Errorf("watchdog report %v, want %v held by its own handler", r, h)
	}
	t.Logf("log:\n%s", log.buf.String())
}

// TestWatchdogOnRelease checks that an OnRelease that does not return is reported as such.
func TestWatchdogOnRelease(t *testing.T) {
	var log watchdogLog
	p := newPoller(t, poller.Options{Waiters: 2, ReleaseWatchdog: 50 * time.Millisecond, Logger: log.logger()})
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	t.Cleanup(unblock) // before Close, which waits for the release
	h, err := p.Add(poller.Registration{FD: newEventfd(t), Events: poller.Readable, CloseFD: true, OnEvent: nop,
		OnRelease: func(poller.Released) {
			close(entered)
			<-release
		}})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Delete(h); err != nil {
		t.Fatal(err)
	}
	wait(t, entered, "OnRelease")
	eventually(t, "a watchdog report", func() bool { return len(log.reports(t)) > 0 })
	unblock()
	barrier(t, p)
	if r := log.reports(t)[0]; r["held_by"] != "OnRelease" || r["oldest"] != h.String() || r["releases"] != float64(1) {
		t.Errorf("watchdog report %v, want %v held by its OnRelease", r, h)
	}
	t.Logf("log:\n%s", log.buf.String())
}
