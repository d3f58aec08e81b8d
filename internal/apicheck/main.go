// Command apicheck calls every exported function and method of package
// poller and uses every exported type, constant and variable, so that
// compiling it for a system proves the package's whole API exists there:
// CI vets and builds it for darwin and windows. On Linux it also runs: a
// pipe is registered, an event delivered, a timer fired, a hold taken, the
// statistics read, the registration deleted and released, and the poller
// closed; it prints "ok". Elsewhere New returns ErrUnsupported, which it
// prints, and it exits 0.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	"github.com/gracepoll/gracepoll/passbuck"
	"github.com/gracepoll/gracepoll/poller"
)

func main() {
	err := run()
	switch {
	case errors.Is(err, poller.ErrUnsupported):
		fmt.Println("apicheck:", err)
	case err != nil:
		fmt.Fprintln(os.Stderr, "apicheck:", err)
		os.Exit(1)
	default:
		fmt.Println("ok")
	}
}

// within bounds every wait for the poller.
const within = 10 * time.Second

func recv[T any](ch <-chan T, what string) (T, error) {
	select {
	case v := <-ch:
		return v, nil
	case <-time.After(within):
		var zero T
		return zero, fmt.Errorf("%s: not within %v", what, within)
	}
}

// constants touches every exported constant and variable.
func constants() error {
	limits := []int{poller.MaxWaiters, poller.MaxMaxEvents}
	durations := []time.Duration{poller.MaxWaitTimeout, poller.DefaultReleaseWatchdog}
	for _, err := range []error{poller.ErrClosed, poller.ErrStale, poller.ErrInvalid, poller.ErrUnsupported, poller.ErrInCallback} {
		if err == nil || err.Error() == "" {
			return errors.New("a sentinel error is empty")
		}
	}
	all := []poller.Events{poller.Readable, poller.Priority, poller.Writable, poller.Error, poller.HangUp, poller.ReadHangUp, poller.EdgeTriggered}
	var set poller.Events
	for _, e := range all {
		set |= e
	}
	reasons := []poller.Reason{poller.Deleted, poller.HungUp, poller.Panicked, poller.Closed}
	topologies := []poller.Topology{poller.PerWaiter, poller.Shared, poller.Stealing}
	choices := []poller.WaiterChoice{poller.LeastLoaded, poller.OnWaiter(0)}
	var h poller.Handle
	if len(limits) != 2 || len(durations) != 2 || set.String() == "" || reasons[3].String() != "closed" ||
		topologies[1].String() != "shared" || choices[1] == choices[0] || h.Slot() != 0 || h.Gen() != 0 || h.String() != "0/0" {
		return errors.New("constants or their String methods are not as documented")
	}
	for _, topo := range topologies {
		text, err := topo.MarshalText()
		var back poller.Topology
		if err != nil || back.UnmarshalText(text) != nil || back != topo {
			return fmt.Errorf("topology %v does not round-trip through its text: %q, %v", topo, text, err)
		}
	}
	return nil
}

// pipe returns an os.Pipe and its read end's descriptor number, read
// without switching the file to blocking mode.
func pipe() (r, w *os.File, fd int, err error) {
	if r, w, err = os.Pipe(); err != nil {
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

func run() error {
	if err := constants(); err != nil {
		return err
	}
	var panics atomic.Int32
	opts := poller.Options{
		Waiters:         2,
		WaitTimeout:     0,
		MaxEvents:       16,
		Topology:        poller.PerWaiter,
		Overrun:         poller.DefaultOverrun,
		MaxWaiters:      2,
		Reclaimer:       passbuck.Factory(passbuck.Options{}),
		LockOSThread:    false,
		OnPanic:         func(h poller.Handle, value any, stack []byte) { panics.Add(1) },
		Logger:          slog.New(slog.NewTextHandler(io.Discard, nil)),
		ReleaseWatchdog: time.Minute,
		TimeHandlers:    true,
	}
	var p *poller.Poller
	p, err := poller.New(opts)
	if err != nil {
		return err
	}
	defer p.Close()
	r, w, fd, err := pipe()
	if err != nil {
		return err
	}
	defer w.Close()

	events := make(chan poller.Event, 4)
	released := make(chan poller.Released, 1)
	var reg poller.Registration = poller.Registration{
		FD:      fd,
		Events:  poller.Readable | poller.ReadHangUp,
		CloseFD: false,
		Waiter:  poller.OnWaiter(1),
		OnEvent: func(e poller.Event) {
			buf := make([]byte, 64)
			if e.Events&poller.Readable != 0 {
				n, _ := r.Read(buf)
				p.CountBytes(e.Handle, n, 0)
			}
			events <- e
		},
		OnRelease: func(rel poller.Released) {
			r.Close() // the file is ours: close it once no handler can use it
			released <- rel
		},
	}
	h, err := p.Add(reg)
	if err != nil {
		return err
	}
	if _, err := w.Write([]byte("ping")); err != nil {
		return err
	}
	e, err := recv(events, "event")
	if err != nil {
		return err
	}
	if e.Handle != h || e.FD != fd || e.Events&poller.Readable == 0 || e.Waiter != 1 {
		return fmt.Errorf("event %+v, want readable %v on fd %d, waiter 1", e, h, fd)
	}
	if err := p.Modify(h, poller.Readable); err != nil {
		return err
	}
	ctx, err := p.Context(h)
	if err != nil {
		return err
	}
	stop, err := p.AfterFunc(h, time.Hour, func() {})
	if err != nil {
		return err
	}
	if !stop() {
		return errors.New("stop of a pending timer reported false")
	}
	fired := make(chan struct{})
	if _, err := p.AfterFunc(h, time.Millisecond, func() { close(fired) }); err != nil {
		return err
	}
	if _, err := recv(fired, "timer"); err != nil {
		return err
	}
	unhold, err := p.Hold(h)
	if err != nil {
		return err
	}
	unhold()
	var info poller.Info
	if info, err = p.Info(h); err != nil {
		return err
	}
	var rs poller.RegistrationStats = info.Registration
	if info.Handle != h || info.FD != fd || !info.Registered || !info.Attached || info.Waiter != 1 ||
		rs.Events != 1 || rs.BytesIn != 4 || rs.BytesOut != 0 || rs.HandlerTime < 0 || rs.Age <= 0 {
		return fmt.Errorf("poller.Info = %+v", info)
	}
	var ws poller.WaiterStats
	if ws, err = p.WaiterStats(info.Waiter); err != nil {
		return err
	}
	if ws.Index != 1 || ws.Name == "" || ws.TID != 0 || ws.Attached != 1 || ws.Events < 1 || ws.Wakeups < 1 ||
		ws.Stale != 0 || ws.Waiting < 0 || ws.Processing < 0 || ws.Utilisation > 1 || ws.Window < 0 ||
		ws.Holding < 0 || ws.GracePeriods > 1<<62 {
		return fmt.Errorf("WaiterStats(1) = %+v", ws)
	}
	p.ResetStats()
	var st poller.Stats = p.Stats()
	var lat poller.Latency = st.ReleaseLatency
	if len(st.Waiters) != p.Waiters() || p.MaxWaiters() < p.Waiters() || st.HandedOff != 0 || st.Grown != 0 || st.Live != 1 || st.ReleasedNotFree != 0 || st.Added != 1 || st.Deleted != 0 ||
		st.Releases != 0 || st.Events < 1 || st.Stale != 0 || st.Wakeups < 1 || st.Panics != 0 || st.ClosedEarly != 0 ||
		lat.P50 != 0 || lat.P99 != 0 || lat.Max != 0 || lat.Samples != 0 || st.OldestPending != 0 || st.Window < 0 ||
		st.Reclaim.Retired != 0 || st.String() == "" {
		return fmt.Errorf("poller.Stats = %+v", st)
	}

	if err := p.Delete(h); err != nil {
		return err
	}
	var rel poller.Released
	if rel, err = recv(released, "release"); err != nil {
		return err
	}
	if rel.Handle != h || rel.FD != fd || rel.Waiter != 1 || rel.Reason != poller.Deleted || rel.Registration.BytesIn != 4 {
		return fmt.Errorf("poller.Released = %+v", rel)
	}
	if ctx.Err() == nil {
		return errors.New("the registration's context is not cancelled after its release")
	}
	if p.InCallback() {
		return errors.New("InCallback is true outside every callback")
	}
	bctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	if err := p.Barrier(bctx); err != nil {
		return err
	}
	if err := p.Close(); err != nil {
		return err
	}
	if _, err := recv(p.Done(), "Done"); err != nil {
		return err
	}
	if n := panics.Load(); n != 0 {
		return fmt.Errorf("%d callbacks panicked", n)
	}
	return nil
}
