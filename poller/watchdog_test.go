//go:build linux

package poller_test

import (
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/gracepoll/gracepoll/internal/testkit"
	"github.com/gracepoll/gracepoll/poller"
)

// TestWatchdog checks that the watchdog reports a release held too long, once, naming what holds
// it, and never releases early.
func TestWatchdog(t *testing.T) {
	var buf testkit.SyncBuffer
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

// TestWatchdogNamesWaiter checks that the watchdog names the waiter that holds up a grace period.
func TestWatchdogNamesWaiter(t *testing.T) {
	var buf testkit.SyncBuffer
	logger := slog.New(slog.NewJSONHandler(&buf, nil))
	p := newPoller(t, poller.Options{Waiters: 2, Topology: poller.PerWaiter, ReleaseWatchdog: 20 * time.Millisecond, Logger: logger})
	h, err := p.Add(poller.Registration{FD: newEventfd(t), Events: poller.Readable, CloseFD: true, OnEvent: nop, Waiter: poller.OnWaiter(0)})
	if err != nil {
		t.Fatal(err)
	}
	_, unblock := blockWaiter(t, p, poller.Registration{Waiter: poller.OnWaiter(1)})
	if err := p.Delete(h); err != nil {
		t.Fatal(err)
	}
	eventually(t, "watchdog report", func() bool { return strings.Contains(buf.String(), "grace period") })
	unblock()
	barrier(t, p)
	var m map[string]any
	if err := json.Unmarshal([]byte(strings.Split(buf.String(), "\n")[0]), &m); err != nil {
		t.Fatal(err)
	}
	if w, ok := m["waiters"].([]any); !ok || len(w) != 1 || w[0] != float64(1) {
		t.Errorf("watchdog report %v, want waiters [1]", m)
	}
}
