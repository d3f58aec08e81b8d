package poller

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"
)

// String renders the snapshot as a table, one row per waiter, then a
// poller-wide line, in the manner of Zap's thread_stats.
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
	fmt.Fprintf(&b, "live %d, released-not-free %d, added %d, deleted %d, releases %d, panics %d\n",
		s.Live, s.ReleasedNotFree, s.Added, s.Deleted, s.Releases, s.Panics)
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

// latencyWindow keeps the most recent release latencies, a fixed number,
// for percentiles. A release records one under a mutex: once per
// registration, never per event.
type latencyWindow struct {
	mu   sync.Mutex
	buf  [4096]time.Duration
	n    int // samples ever written since reset
	next int
}

func (w *latencyWindow) add(d time.Duration) {
	w.mu.Lock()
	w.buf[w.next] = d
	w.next = (w.next + 1) % len(w.buf)
	w.n++
	w.mu.Unlock()
}

func (w *latencyWindow) reset() {
	w.mu.Lock()
	w.n, w.next = 0, 0
	w.mu.Unlock()
}

// summary returns percentiles over the samples kept (the last 4096) and the
// number of samples since the reset.
func (w *latencyWindow) summary() Latency {
	w.mu.Lock()
	k := min(w.n, len(w.buf))
	xs := slices.Clone(w.buf[:k])
	n := w.n
	w.mu.Unlock()
	if k == 0 {
		return Latency{}
	}
	slices.Sort(xs)
	at := func(q float64) time.Duration { return xs[min(k-1, int(q*float64(k)))] }
	return Latency{P50: at(0.50), P99: at(0.99), Max: xs[k-1], Samples: n}
}
