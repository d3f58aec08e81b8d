//go:build linux

package poller_test

import (
	"bytes"
	"context"
	"math/rand/v2"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	"github.com/gracepoll/gracepoll/internal/testkit"
	"github.com/gracepoll/gracepoll/passbuck"
	"github.com/gracepoll/gracepoll/poller"
	"github.com/gracepoll/gracepoll/reclaim"
	"github.com/gracepoll/gracepoll/reclaim/epoch"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// timeout bounds every wait for something that must eventually happen. It
// is generous: the test machine is small and shared.
const timeout = 5 * time.Second

// quiet is how long a test watches for something that must not happen.
const quiet = 20 * time.Millisecond

var (
	topologies = []poller.Topology{poller.Shared, poller.PerWaiter, poller.Stealing}
	reclaimers = []reclaimerKind{passBuck, passBuckClassic, epochQSBR}
)

// reclaimerKind names the reclaimers the tests plug into the poller.
type reclaimerKind int

const (
	passBuck        reclaimerKind = iota // the default: pass-the-buck, skipping offline waiters
	passBuckClassic                      // the original pass-the-buck, which needs a timeout
	epochQSBR                            // epoch-based quiescent-state reclamation
)

func (k reclaimerKind) String() string {
	return [...]string{"passbuck", "passbuck-classic", "epoch"}[k]
}

// factory returns the reclaimer's factory for Options.Reclaimer.
func (k reclaimerKind) factory() reclaim.Factory {
	switch k {
	case passBuckClassic:
		return passbuck.Factory(passbuck.Options{Mode: passbuck.Classic})
	case epochQSBR:
		return epoch.Factory(epoch.Options{})
	}
	return passbuck.Factory(passbuck.Options{})
}

// optsFor returns the options of one configuration; the classic reclaimer
// gets the 1 ms WaitTimeout it needs.
func optsFor(topo poller.Topology, rk reclaimerKind, waiters int) poller.Options {
	o := poller.Options{Waiters: waiters, Topology: topo, Reclaimer: rk.factory()}
	if rk == passBuckClassic {
		o.WaitTimeout = time.Millisecond
	}
	return o
}

// forEachConfig runs f as a subtest for both topologies and all three
// reclaimers, with 3 waiters.
func forEachConfig(t *testing.T, f func(t *testing.T, opts poller.Options)) {
	t.Helper()
	forEachConfigN(t, 3, f)
}

func forEachConfigN(t *testing.T, waiters int, f func(t *testing.T, opts poller.Options)) {
	t.Helper()
	for _, topo := range topologies {
		for _, rk := range reclaimers {
			opts := optsFor(topo, rk, waiters)
			t.Run(topo.String()+"/"+rk.String(), func(t *testing.T) { f(t, opts) })
		}
	}
}

// triggers are the level-triggered and edge-triggered variants.
var triggers = []struct {
	name string
	bits poller.Events
}{{"LT", 0}, {"ET", poller.EdgeTriggered}}

// fdTable returns the open fds of the process, with what they point to.
func fdTable(t testing.TB) map[int]string {
	t.Helper()
	return testkit.FDs(t)
}

func countFDs(t testing.TB) int { return len(fdTable(t)) }

// checkFDLeak records the open fds now and, at cleanup (after the cleanups
// registered later, such as the poller's Close), fails the test if the set
// differs, at once: an fd the poller closes late is a failure.
func checkFDLeak(t testing.TB) {
	t.Helper()
	testkit.CheckFDLeak(t, 0)
}

// newPoller checks for fd leaks, creates a poller and closes it at cleanup,
// where it also checks that every registration was released exactly once.
func newPoller(t testing.TB, opts poller.Options) *poller.Poller {
	t.Helper()
	checkFDLeak(t)
	p, err := poller.New(opts)
	if err != nil {
		t.Fatalf("New(%+v): %v", opts, err)
	}
	t.Cleanup(func() { closeAndCheck(t, p) })
	return p
}

// closeWithin calls p.Close and fails the test if it does not return
// within timeout (rather than hanging the test binary).
func closeWithin(t testing.TB, p *poller.Poller) error {
	t.Helper()
	return testkit.Within(t, timeout, "Close", p.Close)
}

// closeAndCheck closes p and checks the release accounting.
func closeAndCheck(t testing.TB, p *poller.Poller) {
	t.Helper()
	if err := closeWithin(t, p); err != nil {
		t.Errorf("Close: %v", err)
	}
	select {
	case <-p.Done():
	default:
		t.Errorf("Done not closed after Close returned")
	}
	st := p.Stats()
	if st.Live != 0 || st.ReleasedNotFree != 0 || st.Releases != st.Added || st.Deleted != st.Added {
		t.Errorf("after Close: Added %d Deleted %d Releases %d Live %d ReleasedNotFree %d; want every registration deleted and released once",
			st.Added, st.Deleted, st.Releases, st.Live, st.ReleasedNotFree)
	}
}

func newEventfd(t testing.TB) int {
	t.Helper()
	fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		t.Fatalf("eventfd: %v", err)
	}
	return fd
}

func newPipe(t testing.TB) (r, w int) {
	t.Helper()
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		t.Fatalf("pipe2: %v", err)
	}
	return p[0], p[1]
}

func newSocketpair(t testing.TB) (a, b int) {
	t.Helper()
	p, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("socketpair: %v", err)
	}
	return p[0], p[1]
}

// isOpen reports whether fd is open (fcntl F_GETFD succeeds).
func isOpen(fd int) error {
	_, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
	return err
}

// writeEventfd adds n to an eventfd counter.
func writeEventfd(t testing.TB, fd int, n uint64) {
	t.Helper()
	var b [8]byte
	putU64(b[:], n)
	if _, err := unix.Write(fd, b[:]); err != nil {
		t.Errorf("write eventfd %d: %v", fd, err)
	}
}

// readEventfd reads and resets an eventfd counter; 0 if it was not
// readable.
func readEventfd(fd int) uint64 {
	var b [8]byte
	n, err := unix.Read(fd, b[:])
	if err != nil || n != 8 {
		return 0
	}
	return getU64(b[:])
}

func putU64(b []byte, v uint64) {
	for i := range 8 {
		b[i] = byte(v >> (8 * i)) // little-endian: the hosts this runs on
	}
}

func getU64(b []byte) uint64 {
	var v uint64
	for i := range 8 {
		v |= uint64(b[i]) << (8 * i)
	}
	return v
}

// readAll reads fd until EAGAIN, EOF or an error and returns the bytes.
func readAll(fd int) (data []byte, eof bool) {
	var buf [4096]byte
	for {
		n, err := unix.Read(fd, buf[:])
		if n > 0 {
			data = append(data, buf[:n]...)
			continue
		}
		if err == unix.EINTR {
			continue
		}
		return data, err == nil && n == 0
	}
}

// wait waits for ch to be closed or to yield a value.
func wait[T any](t testing.TB, ch <-chan T, what string) T {
	t.Helper()
	return testkit.Wait(t, ch, timeout, what)
}

// eventually polls cond until it holds or timeout passes.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	testkit.Eventually(t, timeout, what, cond)
}

// barrier calls p.Barrier with the standard timeout.
func barrier(t testing.TB, p *poller.Poller) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := p.Barrier(ctx); err != nil {
		t.Fatalf("Barrier: %v", err)
	}
}

// curGoid returns the calling goroutine's id.
func curGoid() int64 {
	var buf [64]byte
	b := buf[:runtime.Stack(buf[:], false)]
	b = bytes.TrimPrefix(b, []byte("goroutine "))
	if i := bytes.IndexByte(b, ' '); i > 0 {
		b = b[:i]
	}
	id, _ := strconv.ParseInt(string(b), 10, 64)
	return id
}

// roundTrip checks that p still works: an eventfd is added, delivers an
// event, is deleted and released.
func roundTrip(t testing.TB, p *poller.Poller) {
	t.Helper()
	roundTripOn(t, p, -1)
}

// roundTripOn is roundTrip on waiter i of a PerWaiter poller, which must
// dispatch the event; -1 lets the poller choose.
func roundTripOn(t testing.TB, p *poller.Poller, i int) {
	t.Helper()
	c := poller.LeastLoaded
	if i >= 0 {
		c = poller.OnWaiter(i)
	}
	fd := newEventfd(t)
	type ev struct {
		v      uint64
		waiter int
	}
	got := make(chan ev, 4)
	rel := make(chan poller.Released, 1)
	h, err := p.Add(poller.Registration{
		FD: fd, Events: poller.Readable, CloseFD: true, Waiter: c,
		OnEvent:   func(e poller.Event) { got <- ev{readEventfd(e.FD), e.Waiter} },
		OnRelease: func(r poller.Released) { rel <- r },
	})
	if err != nil {
		unix.Close(fd)
		t.Fatalf("round trip: Add: %v", err)
	}
	writeEventfd(t, fd, 7)
	e := wait(t, got, "round trip: event")
	if e.v != 7 {
		t.Errorf("round trip: read %d, want 7", e.v)
	}
	if i >= 0 && e.waiter != i {
		t.Errorf("round trip: event on waiter %d, want waiter %d", e.waiter, i)
	}
	if err := p.Delete(h); err != nil {
		t.Fatalf("round trip: Delete: %v", err)
	}
	if r := wait(t, rel, "round trip: release"); r.Handle != h || r.Reason != poller.Deleted {
		t.Errorf("round trip: released %+v, want handle %v reason deleted", r, h)
	}
	barrier(t, p)
}

// basicRelease keeps the identifying fields of r, dropping its statistics.
func basicRelease(r poller.Released) poller.Released {
	return poller.Released{Handle: r.Handle, FD: r.FD, Waiter: r.Waiter, Reason: r.Reason}
}

// newTCPPair returns an accepted loopback TCP connection and its client
// end, both non-blocking, made with raw system calls (not package net, so
// that the runtime's own poller stays out of the fd accounting).
func newTCPPair(t testing.TB) (accepted, client int) {
	t.Helper()
	l := newListener()
	if l < 0 {
		t.Fatal("cannot listen on loopback TCP")
	}
	defer unix.Close(l)
	a, c, err := tcpPair(l)
	if err != nil {
		t.Fatalf("loopback TCP pair: %v", err)
	}
	return a, c
}

// The helpers below are shared by the torture, the fd-reuse test, the
// fuzzer and the load test.

// firstLines returns the first n lines of b, for reports of stacks.
func firstLines(b []byte, n int) string {
	lines := strings.SplitN(string(b), "\n", n+1)
	return strings.Join(lines[:min(n, len(lines))], "\n")
}

// newListener returns a loopback TCP listener, or -1.
func newListener() int {
	l, err := testkit.ListenTCP()
	if err != nil {
		return -1
	}
	return l
}

// tcpPair connects to listener l and accepts: accepted and client, both
// non-blocking.
func tcpPair(l int) (accepted, client int, err error) { return testkit.TCPPair(l) }

// closeRST closes a TCP socket with a reset, leaving no TIME_WAIT behind.
func closeRST(fd int) { testkit.CloseRST(fd) }

// jitter is a random delay inside a callback.
func jitter() {
	switch x := rand.IntN(100); {
	case x < 70:
	case x < 90:
		runtime.Gosched()
	default:
		time.Sleep(time.Duration(rand.IntN(200)) * time.Microsecond)
	}
}

// vlog counts reports and keeps the first few.
type vlog = testkit.Log

// blockWaiter registers an eventfd whose first OnEvent holds its waiter
// inside the handler until unblock is called (or timeout passes), makes it
// readable, and returns once the waiter is inside: that waiter passes no
// quiescent point meanwhile, so no grace period can complete and releases
// retired now stay pending. reg supplies the fields other than FD, Events,
// CloseFD and OnEvent (OnRelease, Waiter). unblock may be called more than
// once; cleanup calls it too.
func blockWaiter(t testing.TB, p *poller.Poller, reg poller.Registration) (h poller.Handle, unblock func()) {
	t.Helper()
	fd := newEventfd(t)
	entered := make(chan struct{})
	release := make(chan struct{})
	var once sync.Once
	reg.FD, reg.Events, reg.CloseFD = fd, poller.Readable, true
	reg.OnEvent = func(e poller.Event) {
		readEventfd(e.FD)
		once.Do(func() {
			close(entered)
			select {
			case <-release:
			case <-time.After(timeout):
			}
		})
	}
	h, err := p.Add(reg)
	if err != nil {
		unix.Close(fd)
		t.Fatalf("blockWaiter: Add: %v", err)
	}
	var unblockOnce sync.Once
	unblock = func() { unblockOnce.Do(func() { close(release) }) }
	t.Cleanup(unblock)
	writeEventfd(t, fd, 1)
	wait(t, entered, "a waiter blocked inside OnEvent")
	return h, unblock
}

// releaseWaiters bounds Released.Waiter: a registration's home (PerWaiter,
// Stealing) is one of the first Waiters, but on a Shared set the waiter that
// last ran it may be one started while the others overran.
func releaseWaiters(p *poller.Poller, opts poller.Options) int {
	if opts.Topology == poller.Shared {
		return p.MaxWaiters()
	}
	return opts.Waiters
}
