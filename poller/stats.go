package poller

import (
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/gracepoll/gracepoll/reclaim"
)

// Statistics per waiter, per registration and per poller, in the manner of
// the OVIS LDMS Zap transport's thread statistics: each waiter's counters
// are written by it alone, once per epoll_wait, and read here, so
// collecting them costs the waiters nothing.

// RegistrationStats are one registration's own counters.
type RegistrationStats struct {
	Events      uint64        `json:"events"`       // OnEvent calls
	BytesIn     uint64        `json:"bytes_in"`     // as reported with CountBytes
	BytesOut    uint64        `json:"bytes_out"`    // as reported with CountBytes
	HandlerTime time.Duration `json:"handler_time"` // in OnEvent; needs Options.TimeHandlers
	Age         time.Duration `json:"age"`          // since Add
}

// Info describes a registration that is live, or released and not yet
// freed: the disconnect path can still read its waiter and counters.
type Info struct {
	Handle Handle `json:"handle"`
	FD     int    `json:"fd"`
	// Registered: in epoll, events still delivered. False once released.
	Registered bool `json:"registered"`
	// Attached: counted in its waiter's Attached; true until its
	// OnRelease has returned.
	Attached     bool              `json:"attached"`
	Waiter       int               `json:"waiter"` // as in Released
	Registration RegistrationStats `json:"registration"`
}

// WaiterStats are one waiter's statistics. Counters are totals since New;
// Utilisation covers the window since New or the last ResetStats.
type WaiterStats struct {
	Index int    `json:"index"`
	Name  string `json:"name"`
	// Running is false for an extra waiter that has retired (and for
	// every waiter after Close); its counters stay readable.
	Running    bool          `json:"running"`
	TID        int           `json:"tid,omitempty"` // OS thread id, with Options.LockOSThread
	Attached   int64         `json:"attached"`      // registrations it owns (PerWaiter)
	Events     uint64        `json:"events"`        // OnEvent calls
	Wakeups    uint64        `json:"wakeups"`       // epoll_wait returns
	Stale      uint64        `json:"stale"`         // events dropped by validation
	Waiting    time.Duration `json:"waiting"`       // in epoll_wait
	Processing time.Duration `json:"processing"`    // everything else
	// Utilisation is processing / (processing + waiting) over Window, or
	// -1 when the window holds no time yet.
	Utilisation float64       `json:"utilisation"`
	Window      time.Duration `json:"window"`
	// Holding counts releases waiting for this waiter's next quiescent
	// point; GracePeriods the quiescent points at which it let releases
	// through.
	Holding      int64  `json:"holding"`
	GracePeriods uint64 `json:"grace_periods"`
}

// Latency summarises release latencies (Delete to the start of the
// release) over the stats window.
type Latency struct {
	P50     time.Duration `json:"p50"`
	P99     time.Duration `json:"p99"`
	Max     time.Duration `json:"max"`
	Samples int           `json:"samples"`
}

// Stats is a snapshot of a poller's statistics. Each waiter's counters are
// read together, waiter by waiter, while the poller runs: totals may be
// skewed by work in flight, never torn.
type Stats struct {
	Waiters         []WaiterStats `json:"waiters"`
	Live            int64         `json:"live"`              // registrations active now
	ReleasedNotFree int64         `json:"released_not_free"` // deleted, release not yet done
	Added           uint64        `json:"added"`
	Deleted         uint64        `json:"deleted"`  // by Delete, hang-up, panic or Close
	Releases        uint64        `json:"releases"` // release work completed
	Events          uint64        `json:"events"`   // OnEvent calls
	Stale           uint64        `json:"stale"`    // events dropped by validation
	Wakeups         uint64        `json:"wakeups"`  // epoll_wait returns
	Panics          uint64        `json:"panics"`
	// HandedOff counts events a blocked waiter had not reached that went
	// to other waiters, and Grown the extra waiters started while all were
	// blocked (Options.Overrun; Shared and Stealing).
	HandedOff uint64 `json:"handed_off"`
	Grown     uint64 `json:"grown"`
	// Detaches counts the waiters found blocked in a handler for Overrun
	// and taken offline in the reclaimer on their behalf (Shared and
	// Stealing), so that releases of other registrations did not wait for
	// the handler.
	Detaches uint64 `json:"detaches"`
	// Disarms counts, with Stealing, the times a waiter found a
	// level-triggered registration running on another and made its entry
	// one-shot until that run ended: two epoll_ctl calls each, the cost of
	// two waiters meeting on one registration.
	Disarms uint64 `json:"disarms"`
	// ClosedEarly counts fds found closed before Delete whose epoll entry
	// survived through another descriptor (see Delete): found at Delete,
	// or when their waiter renewed its epoll set.
	ClosedEarly uint64 `json:"closed_early"`
	// ReleaseLatency covers releases since New or the last ResetStats.
	ReleaseLatency Latency `json:"release_latency"`
	// OldestPending is the age of the oldest released-but-not-free
	// registration, 0 if none.
	OldestPending time.Duration `json:"oldest_pending"`
	Window        time.Duration `json:"window"`
	Reclaim       reclaim.Stats `json:"reclaim"`
}

// waiterOf returns the waiter a registration belongs to (PerWaiter,
// Stealing) or last ran on (Shared), -1 if none.
func (s *slot) waiterOf() int {
	if s.waiter >= 0 {
		return s.waiter
	}
	return int(s.lastWaiter.Load())
}

// regStats reads a slot's own counters. The caller keeps the slot from
// being freed.
func (p *Poller) regStats(s *slot) RegistrationStats {
	return RegistrationStats{
		Events:      s.nEvents.Load(),
		BytesIn:     s.bytesIn.Load(),
		BytesOut:    s.bytesOut.Load(),
		HandlerTime: time.Duration(s.handlerNs.Load()),
		Age:         time.Duration(p.now() - s.addedAt),
	}
}

// Info describes h while it is live or released and not yet freed (its
// final hang-up event included). It returns ErrStale once the release has
// begun, or for a handle never issued. For its waiter's statistics, call
// WaiterStats(Info.Waiter).
func (p *Poller) Info(h Handle) (Info, error) {
	s, err := p.acquire(h, true)
	if err != nil {
		return Info{}, err
	}
	defer p.unhold(s)
	return Info{
		Handle:       h,
		FD:           s.fd,
		Registered:   s.active(h.Gen()),
		Attached:     s.attached,
		Waiter:       s.waiterOf(),
		Registration: p.regStats(s),
	}, nil
}

// WaiterStats returns waiter i's statistics, or ErrInvalid for an index
// out of range.
func (p *Poller) WaiterStats(i int) (WaiterStats, error) {
	if n := int(p.highWater.Load()); i < 0 || i >= n {
		return WaiterStats{}, fmt.Errorf("%w: waiter %d of %d", ErrInvalid, i, n)
	}
	parts := p.rec.Stats().Participants
	p.statsMu.Lock()
	defer p.statsMu.Unlock()
	return p.waiterStatsLocked(i, p.now(), parts), nil
}

// times returns waiter w's waiting and processing totals, the running
// phase included.
func (p *Poller) times(w *waiter, now int64) (wait, proc int64) {
	ph := w.phase.Load()
	wait, proc = w.waitNs.Load(), w.procNs.Load()
	switch {
	case ph > 0:
		wait += max(now-ph, 0)
	case ph < 0:
		proc += max(now+ph, 0)
	}
	return wait, proc
}

func (p *Poller) waiterStatsLocked(i int, now int64, parts []reclaim.ParticipantStats) WaiterStats {
	w := &p.waiters[i]
	wait, proc := p.times(w, now)
	ws := WaiterStats{
		Index:       i,
		Name:        w.name,
		Running:     w.running.Load(),
		TID:         int(w.tid.Load()),
		Attached:    w.attached.Load(),
		Events:      w.events.Load(),
		Wakeups:     w.wakeups.Load(),
		Stale:       w.stale.Load(),
		Waiting:     time.Duration(wait),
		Processing:  time.Duration(proc),
		Utilisation: -1,
		Window:      time.Duration(now - p.windowStart),
	}
	dw, dp := wait-p.baseWait[i], proc-p.baseProc[i]
	if dw+dp > 0 {
		ws.Utilisation = float64(dp) / float64(dw+dp)
	}
	if i < len(parts) {
		ws.Holding, ws.GracePeriods = parts[i].Holding, parts[i].Passed
	}
	return ws
}

// Stats returns a snapshot of the poller's statistics.
func (p *Poller) Stats() Stats {
	rs := p.rec.Stats()
	st := Stats{
		Added:          uint64(p.added.Value()),
		Deleted:        uint64(p.deleted.Value()),
		Releases:       uint64(p.releases.Value()),
		Panics:         uint64(p.panics.Value()),
		ClosedEarly:    uint64(p.closedEarly.Value()),
		HandedOff:      p.handedOff.Load(),
		Grown:          p.grown.Load(),
		Detaches:       p.detaches.Load(),
		Disarms:        p.disarms.Load(),
		Reclaim:        rs,
		ReleaseLatency: p.latency.summary(),
		OldestPending:  p.oldestPending(),
	}
	p.statsMu.Lock()
	now := p.now()
	st.Window = time.Duration(now - p.windowStart)
	st.Waiters = make([]WaiterStats, p.highWater.Load())
	for i := range st.Waiters {
		ws := p.waiterStatsLocked(i, now, rs.Participants)
		st.Waiters[i] = ws
		st.Events += ws.Events
		st.Stale += ws.Stale
		st.Wakeups += ws.Wakeups
	}
	p.statsMu.Unlock()
	st.Live = int64(st.Added) - int64(st.Deleted)
	st.ReleasedNotFree = int64(st.Deleted) - int64(st.Releases)
	return st
}

// ResetStats starts a new window for utilisation and release latency.
// Counters are totals and are not reset.
func (p *Poller) ResetStats() {
	p.statsMu.Lock()
	now := p.now()
	p.windowStart = now
	for i := range int(p.highWater.Load()) {
		p.baseWait[i], p.baseProc[i] = p.times(&p.waiters[i], now)
	}
	p.statsMu.Unlock()
	p.latency.reset()
}

// pendingAge returns how long slot s has been released and not yet free,
// or false if it is not.
func (p *Poller) pendingAge(s *slot, now int64) (state, int64, bool) {
	v := s.load()
	if l := v.life(); l != lifeReleased && l != lifeFreeing {
		return v, 0, false
	}
	at := s.deletedAt.Load()
	return v, now - at, at > 0
}

// oldestPending scans the slots for the oldest released-but-not-free one.
func (p *Poller) oldestPending() time.Duration {
	now := p.now()
	var oldest int64
	for i := range p.tab.used() {
		if _, age, ok := p.pendingAge(p.tab.get(i), now); ok {
			oldest = max(oldest, age)
		}
	}
	return time.Duration(oldest)
}

// watch is the release watchdog: every ReleaseWatchdog/4 it looks for
// releases pending longer than ReleaseWatchdog and reports what holds them,
// once per cause (see watchdog). It only reads: it never releases early.
func (p *Poller) watch() {
	defer close(p.wdDone)
	tick := time.NewTicker(max(p.opts.ReleaseWatchdog/4, time.Millisecond))
	defer tick.Stop()
	wd := newWatchdog(p)
	for {
		select {
		case <-p.watchdog:
			return
		case <-tick.C:
		}
		wd.tick(p.now())
	}
}

// The causes that hold a release, as the watchdog tells them apart.
const (
	// A waiter that has not passed a quiescent point for a whole
	// ReleaseWatchdog while the reclaimer counts releases waiting for it:
	// most often a callback blocked on it (PerWaiter).
	causeWaiter = iota
	// The grace period, when no waiter is found stuck: the waiters the
	// reclaimer counts as holding releases are named.
	causeGrace
	// Holds taken with Hold (or internal reads) not yet released, after
	// the grace period.
	causeHolds
	// A handler of the released registration itself, still running (its
	// running bit pins the slot: Shared, Stealing).
	causeHandler
	// OnRelease still running.
	causeOnRelease
)

// cause is what holds a release: a kind, and for causeWaiter the waiter.
type cause struct{ kind, waiter int }

// finding is one cause's releases pending too long, as one tick found them.
type finding struct {
	n      int64  // releases held
	oldest Handle // the oldest of them (for causeWaiter, of the grace period's)
	age    int64  // its age, since Delete
	holds  uint64 // causeHolds: the holds on them
	waiter int    // causeHandler: the oldest's waiter (as Info reports it), -1 if gone
	stuck  int64  // causeWaiter: how long it has not passed a quiescent point
	// causeGrace: the waiters the reclaimer counts as holding releases.
	waiters []int
}

// waiterSeen is what the watchdog last saw of a waiter: its phase and claim
// cursor, and since when, at the latest, it has been in that state.
type waiterSeen struct{ phase, cursor, since int64 }

// tracked is a cause the watchdog has found: the count it reported (0 if
// none yet), the last tick that found it, and for how many ticks in a row.
type tracked struct{ n, seen, ticks int64 }

// watchdog is the state of the watch goroutine, its alone. Each tick it
// scans the slots for releases pending longer than the limit, sorts them by
// cause and reports each cause once, with a count and the oldest release:
// a blocked waiter holding two hundred releases is one line, not two
// hundred. A cause is reported once two ticks in a row have found it, so a
// passing state is not (a release its last hold retired again is in a
// second grace period for a moment, its age counted from Delete). It is
// reported again only when its count has at least doubled since its last
// report, or once it has been gone for a whole limit and comes back; so
// however many releases wait, and however long, a cause costs a few lines.
//
// It also watches every waiter's phase and claim cursor (two atomic loads
// each) to tell how long a waiter has gone without a quiescent point: a
// waiter passes one only between batches, which moves its cursor, or when
// it blocks, which changes its phase; while both stay as they were, it is
// inside one dispatch. The estimate is the later of the moment it came out
// of epoll_wait and the last tick that saw it elsewhere, so it is exact for
// a waiter that blocked in the batch it woke for, and otherwise too long by
// at most a tick.
//
// Cost per tick: a load of the two release counters; only when releases
// are pending, a load of each slot's word; only when some are older than
// the limit and wait for a grace period, one reclaimer Stats.
type watchdog struct {
	p       *Poller
	limit   int64
	last    int64 // the previous tick
	seen    []waiterSeen
	found   map[cause]*finding
	tracked map[cause]tracked
}

func newWatchdog(p *Poller) *watchdog {
	return &watchdog{
		p:       p,
		limit:   int64(p.opts.ReleaseWatchdog),
		seen:    make([]waiterSeen, len(p.waiters)),
		found:   make(map[cause]*finding),
		tracked: make(map[cause]tracked),
	}
}

// tick looks at the waiters and the pending releases at time now, and
// reports the causes that are new or have doubled.
func (wd *watchdog) tick(now int64) {
	p := wd.p
	for i := range int(p.highWater.Load()) {
		w := &p.waiters[i]
		ph, cur := w.phase.Load(), w.b.next.Load()
		if o := &wd.seen[i]; ph != o.phase || cur != o.cursor {
			*o = waiterSeen{phase: ph, cursor: cur, since: max(-ph, wd.last)}
		}
	}
	prev := wd.last
	wd.last = now
	clear(wd.found)
	if p.deleted.Value() != p.releases.Value() {
		wd.scan(now)
	}
	if len(wd.found) > 0 {
		causes := make([]cause, 0, len(wd.found))
		for c := range wd.found {
			causes = append(causes, c)
		}
		slices.SortFunc(causes, func(a, b cause) int {
			if a.kind != b.kind {
				return a.kind - b.kind
			}
			return a.waiter - b.waiter
		})
		for _, c := range causes {
			f, t := wd.found[c], wd.tracked[c]
			if t.seen == prev {
				t.ticks++
			} else {
				t.ticks = 1
			}
			if t.ticks >= 2 && (t.n == 0 || f.n >= 2*t.n) {
				p.reportHeld(c, f)
				t.n = f.n
			}
			t.seen = now
			wd.tracked[c] = t
		}
	}
	for c, t := range wd.tracked {
		if now-t.seen >= wd.limit {
			delete(wd.tracked, c) // gone a whole limit: report it if it comes back
		}
	}
}

// scan sorts the releases pending longer than the limit by cause.
func (wd *watchdog) scan(now int64) {
	p := wd.p
	var grace finding
	add := func(c cause, s *slot, v state, age int64) *finding {
		f := wd.found[c]
		if f == nil {
			f = &finding{}
			wd.found[c] = f
		}
		f.n++
		if age > f.age {
			f.oldest, f.age = s.handle(v.gen()), age
		}
		return f
	}
	for i := range p.tab.used() {
		s := p.tab.get(i)
		v, age, ok := p.pendingAge(s, now)
		if !ok || age < wd.limit {
			continue
		}
		switch {
		case v.life() == lifeFreeing:
			add(cause{kind: causeOnRelease}, s, v, age)
		case v.has(bitRunning):
			// Before its grace period ends, too: the grace period
			// waits for the waiter running it, which is reported on
			// its own line if it holds other releases.
			add(cause{kind: causeHandler}, s, v, age)
		case v.has(bitWaitHolds) && v.holds() > 0:
			add(cause{kind: causeHolds}, s, v, age).holds += v.holds()
		default:
			grace.n++
			if age > grace.age {
				grace.oldest, grace.age = s.handle(v.gen()), age
			}
		}
	}
	if f := wd.found[cause{kind: causeHandler}]; f != nil {
		// The slot's plain fields are read under a hold, as Info does:
		// it may be released meanwhile.
		f.waiter = -1
		if info, err := p.Info(f.oldest); err == nil {
			f.waiter = info.Waiter
		}
	}
	if grace.n == 0 {
		return
	}
	// Which waiters does the grace period wait for, and for how long have
	// they gone without a quiescent point?
	for i, ps := range p.rec.Stats().Participants {
		if ps.Holding <= 0 {
			continue
		}
		grace.waiters = append(grace.waiters, i)
		if i >= len(wd.seen) {
			continue
		}
		// Half the limit: a busy waiter that holds releases for a moment
		// has been seen elsewhere within a tick (a quarter), and a waiter
		// that blocked just after a release it holds was retired is
		// still found stuck by the time that release is overdue.
		if o := wd.seen[i]; o.phase < 0 && now-o.since >= wd.limit/2 {
			wd.found[cause{kind: causeWaiter, waiter: i}] = &finding{
				n: ps.Holding, oldest: grace.oldest, age: grace.age, stuck: now - o.since}
		}
	}
	for c := range wd.found {
		if c.kind == causeWaiter {
			return // the stuck waiters explain the grace period
		}
	}
	wd.found[cause{kind: causeGrace}] = &grace
}

// reportHeld logs one cause of releases pending too long.
func (p *Poller) reportHeld(c cause, f *finding) {
	ms := func(d int64) time.Duration { return time.Duration(d).Round(time.Millisecond) }
	var msg string
	var args []any
	switch c.kind {
	case causeWaiter:
		msg = "a waiter has not passed a quiescent point (a callback blocked on it?)"
		args = []any{"held_by", "waiter", "waiter", c.waiter, "stuck", ms(f.stuck)}
	case causeGrace:
		msg = "the grace period, waiting for the waiters listed"
		args = []any{"held_by", "grace period", "waiters", f.waiters}
	case causeHolds:
		msg = "holds not released (a Hold whose release was not called?)"
		args = []any{"held_by", "holds", "holds", f.holds}
	case causeHandler:
		msg = "its own handler still running"
		args = []any{"held_by", "own handler", "waiter", f.waiter}
	case causeOnRelease:
		msg = "OnRelease still running"
		args = []any{"held_by", "OnRelease"}
	}
	args = append(args, "releases", f.n, "oldest", f.oldest.String(), "age", ms(f.age))
	p.opts.Logger.Warn("poller: releases pending too long: "+msg+"; still waiting, never releasing early", args...)
}

// latencyWindow keeps the most recent release latencies, a fixed number,
// for percentiles. A release records one with two atomic operations, no
// lock; a sample being overwritten while summary reads it only blurs a
// percentile.
type latencyWindow struct {
	buf [4096]atomic.Int64
	n   atomic.Int64 // samples written since New
	at  atomic.Int64 // n at the last reset
}

func (w *latencyWindow) add(d time.Duration) {
	i := w.n.Add(1) - 1
	w.buf[i%int64(len(w.buf))].Store(int64(d))
}

func (w *latencyWindow) reset() { w.at.Store(w.n.Load()) }

// summary returns percentiles over the samples kept (the last 4096 since
// the reset) and the number of samples since the reset.
func (w *latencyWindow) summary() Latency {
	n := w.n.Load()
	since := n - w.at.Load()
	k := min(since, int64(len(w.buf)))
	if k <= 0 {
		return Latency{}
	}
	xs := make([]time.Duration, k)
	for j := range k {
		xs[j] = time.Duration(w.buf[(n-1-j)%int64(len(w.buf))].Load())
	}
	slices.Sort(xs)
	at := func(q float64) time.Duration { return xs[min(int(k)-1, int(q*float64(k)))] }
	return Latency{P50: at(0.50), P99: at(0.99), Max: xs[k-1], Samples: int(since)}
}

// String renders the snapshot as a table, one row per waiter, then a
// poller-wide line.
func (s Stats) String() string {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "waiter\tname\ttid\tattached\tevents\twakeups\tstale\twaiting\tprocessing\tutil\tholding\tgps\t")
	for _, w := range s.Waiters {
		tid := "-"
		if w.TID != 0 {
			tid = fmt.Sprint(w.TID)
		}
		util := "-"
		if w.Utilisation >= 0 {
			util = fmt.Sprintf("%.1f%%", 100*w.Utilisation)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%d\t%d\t%d\t%s\t%s\t%s\t%d\t%d\t\n",
			w.Index, w.Name, tid, w.Attached, w.Events, w.Wakeups, w.Stale,
			round(w.Waiting), round(w.Processing), util, w.Holding, w.GracePeriods)
	}
	tw.Flush()
	fmt.Fprintf(&b, "live %d, released-not-free %d, added %d, deleted %d, releases %d, panics %d, closed-early %d\n",
		s.Live, s.ReleasedNotFree, s.Added, s.Deleted, s.Releases, s.Panics, s.ClosedEarly)
	l := s.ReleaseLatency
	fmt.Fprintf(&b, "release latency p50 %v p99 %v max %v (%d in %v), oldest pending %v\n",
		round(l.P50), round(l.P99), round(l.Max), l.Samples, round(s.Window), round(s.OldestPending))
	return b.String()
}

// round keeps durations readable: three significant figures or so.
func round(d time.Duration) time.Duration {
	switch {
	case d >= time.Second:
		return d.Round(time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(time.Microsecond)
	case d >= time.Microsecond:
		return d.Round(10 * time.Nanosecond)
	}
	return d
}
