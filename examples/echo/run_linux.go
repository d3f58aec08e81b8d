//go:build linux

package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/gracepoll/gracepoll/examples/echo/echoserver"
	"github.com/gracepoll/gracepoll/poller"
)

// run starts the server and the load generator, reports progress every
// cfg.tick unless cfg.Quiet, stops after cfg.Duration and writes the
// summary. The error is for setup failures; correctness is in the result.
func run(cfg config, w io.Writer) (result, error) {
	opts, err := cfg.options()
	if err != nil {
		return result{}, err
	}
	srv, err := echoserver.New(opts, cfg.sndBuf)
	if err != nil {
		return result{}, err
	}
	if !cfg.Quiet {
		fmt.Fprintf(w, "echo server on %s: %d waiters, %v topology, %v reclaimer; %d connections, %d-byte messages, churn %.0f%%/s, %v\n",
			srv.Addr(), len(srv.Poller().Stats().Waiters), opts.Topology, cfg.Reclaimer, cfg.Conns, cfg.Size, cfg.Churn*100, cfg.Duration)
	}
	g := newLoadgen(srv.Addr(), cfg)
	srv.Poller().ResetStats() // release latencies from here on
	began := time.Now()
	g.start()

	tick := time.NewTicker(cfg.tick)
	end := time.NewTimer(cfg.Duration)
	var (
		next      int     // next slot to churn
		owed      float64 // churn carried over between ticks
		lastMsgs  uint64
		lastAt    = began
		lastChurn = began
	)
loop:
	for {
		select {
		case <-end.C:
			break loop
		case now := <-tick.C:
			// Owed by the time elapsed, not the tick count: a ticker
			// drops ticks when the machine is too busy to take them.
			owed += cfg.Churn * float64(cfg.Conns) * now.Sub(lastChurn).Seconds()
			lastChurn = now
			k := int(owed)
			owed -= float64(k)
			g.churn(k, &next)
			if cfg.Quiet {
				continue
			}
			msgs := g.msgs()
			st := srv.Poller().Stats()
			fmt.Fprintf(w, "[%5.1fs] %8.0f msgs/s  open %d  reopened %d  errors %d  mismatches %d | server: live %d  released-not-free %d  stale %d\n",
				now.Sub(began).Seconds(), float64(msgs-lastMsgs)/now.Sub(lastAt).Seconds(),
				g.opened.Load()-g.closed.Load(), g.reopened.Load(), g.errors.Load(), g.mismatches.Load(),
				st.Live, st.ReleasedNotFree, st.Stale)
			fmt.Fprint(w, statsTable(st))
			lastMsgs, lastAt = msgs, now
		}
	}
	tick.Stop()
	during := srv.Poller().Stats().ReleaseLatency
	srv.Poller().ResetStats() // releases after this are the shutdown burst
	g.halt()
	elapsed := time.Since(began)

	// Let the server see the last closes: every connection the client
	// closed must be released by the server's own Delete or the poller's
	// hang-up path, not by Close (which would hide a leak).
	settle := time.Now().Add(2 * time.Second)
	for srv.Open() > 0 && time.Now().Before(settle) {
		time.Sleep(time.Millisecond)
	}
	unreleased := srv.Open()
	st := srv.Poller().Stats()
	srv.Close()
	res := result{
		Elapsed:      elapsed,
		Msgs:         g.msgs(),
		Size:         cfg.Size,
		Opened:       g.opened.Load(),
		Closed:       g.closed.Load(),
		Reopened:     g.reopened.Load(),
		Mismatches:   g.mismatches.Load(),
		CrossedBytes: g.crossed.Load(),
		Errors:       g.errors.Load(),
		FirstError:   g.firstError(),
		Accepted:     srv.Accepted(),
		Released:     srv.Released(),
		Unreleased:   unreleased,
		Latency:      during,
		StopLatency:  st.ReleaseLatency,
		Stats:        st,
	}
	res.summary(w, cfg, opts)
	return res, nil
}

// statsTable renders the poller's per-waiter statistics table
// (poller.Stats.String), indented under the progress line.
func statsTable(st poller.Stats) string {
	var b strings.Builder
	for line := range strings.Lines(st.String()) {
		b.WriteString("    ")
		b.WriteString(line)
	}
	return b.String()
}
