package main

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/gracepoll/gracepoll/conn"
	"github.com/gracepoll/gracepoll/poller"
)

// result is what a run measured, client side and server side.
type result struct {
	Elapsed time.Duration // how long the load ran
	Msgs    uint64        // replies received and checked
	Size    int           // message size

	// Client side.
	Opened, Closed, Reopened uint64 // connections; Reopened counts churn
	Mismatches               uint64 // replies that differ from their request
	CrossedBytes             uint64 // reply bytes that belong to another connection
	Errors                   uint64 // dial, read or write errors, timeouts
	FirstError               string // the first of them, to say what went wrong

	// Server side.
	Accepted, Released uint64            // connection registrations added and released
	Unreleased         int64             // registrations of closed connections still not released before Close
	Latency            poller.Latency    // Delete to release, of connections released while the load ran (the poller's last 4096)
	StopLatency        poller.Latency    // the same for the burst of closes when the load stopped
	Stats              poller.Stats      // the poller's counters just before Close
	Conn               *conn.ServerStats // the conn server's counters just before Close; nil for -server raw
}

// correct reports whether every reply matched its request, no bytes crossed
// connections, no connection failed, every connection the client closed was
// released without waiting for Close, and every registration was released
// exactly once.
func (r result) correct() bool {
	return r.Msgs > 0 && r.Mismatches == 0 && r.CrossedBytes == 0 && r.Errors == 0 &&
		r.Unreleased == 0 && r.Accepted == r.Released
}

// summary writes the end-of-run report.
func (r result) summary(w io.Writer, cfg config, opts poller.Options) {
	secs := r.Elapsed.Seconds()
	fmt.Fprintf(w, "\nsummary: %s server, %.1fs, %d waiters, %v topology, %v reclaimer, epoll_wait timeout %v\n",
		cfg.Server, secs, len(r.Stats.Waiters), opts.Topology, cfg.Reclaimer, timeoutText(opts.WaitTimeout))
	fmt.Fprintf(w, "  messages:         %d of %d bytes, %.0f msgs/s\n", r.Msgs, r.Size, float64(r.Msgs)/secs)
	fmt.Fprintf(w, "  connections:      %d opened, %d closed by the client (%d reopened by churn, %.1f/s); server accepted %d, released %d\n",
		r.Opened, r.Closed, r.Reopened, float64(r.Reopened)/secs, r.Accepted, r.Released)
	if lat := r.Latency; lat.Samples > 0 {
		fmt.Fprintf(w, "  release latency:  p50 %v, p99 %v, max %v (Delete to release, %d releases while the load ran)\n",
			round(lat.P50), round(lat.P99), round(lat.Max), lat.Samples)
	} else {
		fmt.Fprintf(w, "  release latency:  no connection was deleted while the load ran (try -churn or a longer -duration)\n")
	}
	if lat := r.StopLatency; lat.Samples > 0 {
		// When the load stops every connection closes at once, and the
		// releases of one grace period run one after another (each closes
		// its socket), so the last of a batch waits for the others.
		fmt.Fprintf(w, "                    at stop: p50 %v, p99 %v (%d connections closed at once)\n",
			round(lat.P50), round(lat.P99), lat.Samples)
	}
	if r.Conn != nil {
		fmt.Fprintf(w, "  conn server:      %s\n", connLine(*r.Conn))
		if cfg.TLS {
			fmt.Fprintf(w, "  tls:              %s\n", tlsLine(r.Conn.TLS))
		}
	}
	fmt.Fprintf(w, "  stale events:     %d dropped by validation (events for registrations already deleted)\n", r.Stats.Stale)
	if r.Errors > 0 {
		fmt.Fprintf(w, "  client errors:    %d (first: %s)\n", r.Errors, r.FirstError)
	}
	if r.correct() {
		fmt.Fprintf(w, "correctness: OK: every reply matched its request (%d replies); 0 bytes crossed connections\n", r.Msgs)
		return
	}
	fmt.Fprintf(w, "correctness: FAILED: %d replies, %d mismatched, %d bytes crossed connections, %d client errors, "+
		"%d closed connections not released until Close, %d registrations accepted and %d released\n",
		r.Msgs, r.Mismatches, r.CrossedBytes, r.Errors, r.Unreleased, r.Accepted, r.Released)
}

// tlsText says whether the run is over TLS, for the banner.
func tlsText(on bool) string {
	if on {
		return " over TLS (self-signed certificate)"
	}
	return ""
}

// tlsLine renders a conn server's TLS handshake counters on one line.
func tlsLine(st conn.TLSStats) string {
	return fmt.Sprintf("handshakes %d (p50 %v, p99 %v)  in progress %d  timed out %d  refused %d  failed: %s",
		st.Handshakes, round(st.P50), round(st.P99), st.InProgress, st.TimedOut, st.Refused, counts(st.Failed))
}

// counts renders counters by name, sorted: "eof 2, reset 1", or "none".
func counts(m map[string]uint64) string {
	if len(m) == 0 {
		return "none"
	}
	parts := make([]string, 0, len(m))
	for name, n := range m {
		parts = append(parts, fmt.Sprintf("%s %d", name, n))
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}

func timeoutText(d time.Duration) string {
	if d == 0 {
		return "none"
	}
	return d.String()
}

// round trims a latency to a readable precision.
func round(d time.Duration) time.Duration {
	switch {
	case d >= 10*time.Millisecond:
		return d.Round(100 * time.Microsecond)
	case d >= 10*time.Microsecond:
		return d.Round(time.Microsecond)
	}
	return d.Round(100 * time.Nanosecond)
}

// connLine renders a conn server's counters on one line.
func connLine(st conn.ServerStats) string {
	return fmt.Sprintf("open %d  accepted %d  closed: %s  accept pauses %d  accept errors %d  lost output %d B",
		st.Open, st.Accepted, counts(st.Closed), st.AcceptPauses, st.AcceptErrors, st.LostOutput)
}
