//go:build linux

package main

import (
	"crypto/tls"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/gracepoll/gracepoll/conn"
	"github.com/gracepoll/gracepoll/examples/echo/connecho"
	"github.com/gracepoll/gracepoll/examples/echo/echoserver"
	"github.com/gracepoll/gracepoll/examples/echo/loadgen"
	"github.com/gracepoll/gracepoll/internal/selfsigned"
	"github.com/gracepoll/gracepoll/poller"
)

// server is what run needs of either echo server.
type server interface {
	Addr() string
	Poller() *poller.Poller
	Open() int64      // connections opened and not yet released
	Accepted() uint64 // connections opened
	Released() uint64 // connections released (OnRelease, or conn's OnClose)
	Close() error
}

// connStats returns the conn server's counters, or nil for the raw server.
func connStats(srv server) *conn.ServerStats {
	if cs, ok := srv.(*connecho.Server); ok {
		st := cs.Stats()
		return &st
	}
	return nil
}

// startServer starts the server cfg.Server names. With cfg.TLS it serves a
// new self-signed certificate, and client is a configuration that trusts
// it (nil without TLS).
func startServer(cfg config, opts poller.Options) (srv server, client *tls.Config, err error) {
	if cfg.Server == "raw" {
		srv, err = echoserver.New(opts, cfg.sndBuf)
		return srv, nil, err
	}
	co := conn.Options{Poller: opts, SendBuffer: cfg.sndBuf}
	if cfg.TLS {
		cert, err := selfsigned.New()
		if err != nil {
			return nil, nil, err
		}
		co.TLS = &tls.Config{Certificates: []tls.Certificate{cert.TLS}}
		// No ServerName: the load generator verifies the certificate
		// for the address it dials, 127.0.0.1.
		client = &tls.Config{RootCAs: cert.Pool()}
	}
	srv, err = connecho.New(co)
	return srv, client, err
}

// run starts the server and the load generator, reports progress every
// cfg.tick unless cfg.Quiet, stops after cfg.Duration and writes the
// summary. The error is for setup failures; correctness is in the result.
func run(cfg config, w io.Writer) (result, error) {
	opts, err := cfg.options()
	if err != nil {
		return result{}, err
	}
	srv, client, err := startServer(cfg, opts)
	if err != nil {
		return result{}, err
	}
	if !cfg.Quiet {
		fmt.Fprintf(w, "echo server (%s) on %s%s: %d waiters, %v topology, %v reclaimer; %d connections, %d-byte messages, churn %.0f%%/s, %v\n",
			serverName(cfg.Server), srv.Addr(), tlsText(cfg.TLS), len(srv.Poller().Stats().Waiters), opts.Topology, cfg.Reclaimer, cfg.Conns, cfg.Size, cfg.Churn*100, cfg.Duration)
	}
	g, err := loadgen.New(loadgen.Config{Addr: srv.Addr(), Conns: cfg.Conns, Size: cfg.Size, IOTimeout: cfg.ioTimeout, TLS: client})
	if err != nil {
		srv.Close()
		return result{}, err
	}
	srv.Poller().ResetStats() // release latencies from here on
	began := time.Now()
	g.Start()

	tick := time.NewTicker(cfg.tick)
	end := time.NewTimer(cfg.Duration)
	var (
		lastMsgs  uint64
		lastAt    = began
		lastChurn = began
	)
loop:
	for {
		select {
		case <-end.C:
			break loop
		case <-cfg.stop:
			fmt.Fprintf(w, "stopped by a signal after %v\n", time.Since(began).Round(time.Millisecond))
			break loop
		case now := <-tick.C:
			// Owed by the time elapsed, not the tick count: a ticker
			// drops ticks when the machine is too busy to take them.
			g.ChurnFor(now.Sub(lastChurn), cfg.Churn)
			lastChurn = now
			if cfg.Quiet {
				continue
			}
			msgs := g.Msgs()
			st := srv.Poller().Stats()
			gc := g.Counters()
			fmt.Fprintf(w, "[%5.1fs] %8.0f msgs/s  open %d  reopened %d  errors %d  mismatches %d | server: live %d  released-not-free %d  stale %d\n",
				now.Sub(began).Seconds(), float64(msgs-lastMsgs)/now.Sub(lastAt).Seconds(),
				gc.Opened-gc.Closed, gc.Reopened, gc.Errors, gc.Mismatches,
				st.Live, st.ReleasedNotFree, st.Stale)
			if cst := connStats(srv); cst != nil {
				fmt.Fprintf(w, "    conn: %s\n", connLine(*cst))
				if cfg.TLS {
					fmt.Fprintf(w, "    tls:  %s\n", tlsLine(cst.TLS))
				}
			}
			fmt.Fprint(w, statsTable(st))
			lastMsgs, lastAt = msgs, now
		}
	}
	tick.Stop()
	during := srv.Poller().Stats().ReleaseLatency
	srv.Poller().ResetStats() // releases after this are the shutdown burst
	g.Stop()
	elapsed := time.Since(began)
	g.Close()

	// Let the server see the last closes: every connection the client
	// closed must be released by the server's own Delete or the poller's
	// hang-up path, not by Close (which would hide a leak).
	settle := time.Now().Add(2 * time.Second)
	for srv.Open() > 0 && time.Now().Before(settle) {
		time.Sleep(time.Millisecond)
	}
	unreleased := srv.Open()
	st := srv.Poller().Stats()
	cst := connStats(srv)
	srv.Close()
	gc := g.Counters()
	res := result{
		Elapsed:      elapsed,
		Msgs:         gc.Msgs,
		Size:         cfg.Size,
		Opened:       gc.Opened,
		Closed:       gc.Closed,
		Reopened:     gc.Reopened,
		Mismatches:   gc.Mismatches,
		CrossedBytes: gc.Crossed,
		Errors:       gc.Errors,
		FirstError:   gc.FirstError,
		Accepted:     srv.Accepted(),
		Released:     srv.Released(),
		Unreleased:   unreleased,
		Latency:      during,
		StopLatency:  st.ReleaseLatency,
		Stats:        st,
		Conn:         cst,
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

// serverName describes the -server choice.
func serverName(s string) string {
	if s == "raw" {
		return "raw poller: echoserver"
	}
	return "package conn: connecho"
}
