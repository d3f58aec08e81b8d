// Command echo runs an echo server built on gracepoll together with an
// in-process load generator, and checks every reply.
//
//	go run ./examples/echo               # 500 connections, 64-byte messages, 10 s
//	go run ./examples/echo -server raw   # the same on the raw poller
//	go run ./examples/echo -h            # every flag
//
// By default the server is package conn's: a Handler of a few lines
// (examples/echo/connecho). With -server raw it is examples/echo/echoserver,
// the same server written directly on poller.Poller (the one bench/peers
// measures): comparing the two shows what the connection layer costs.
// Either way the listening socket and every accepted connection are
// registrations of one poller.Poller. Connections are closed and reopened by the load
// generator all the time (10 % of them every second by default), so the
// poller deletes registrations while other waiters may hold events for them:
// the situation gracepoll exists for; half of them end with a reset, which
// takes the poller's hang-up path. Every second the program prints a
// progress line and the poller's per-waiter statistics; at the end a summary
// with messages/s, connections opened and closed, the Delete-to-OnRelease
// latency, the stale events the poller dropped, and a correctness line:
// every reply must equal its request byte for byte, and no reply may carry
// bytes of another connection. The exit status is 1 if that line fails.
//
// With -tls the same runs over TLS: the server (package conn's, on the
// unmodified crypto/tls) serves a self-signed certificate made at startup
// (internal/selfsigned), the load generator's connections are
// crypto/tls clients that verify it, every reopen is a full handshake, and
// the check is on the plaintext. The summary adds the server's handshake
// counters and latency.
//
//	go run ./examples/echo -tls
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/gracepoll/gracepoll/passbuck"
	"github.com/gracepoll/gracepoll/poller"
	"github.com/gracepoll/gracepoll/reclaim/epoch"
)

// config holds every knob of a run. The exported-looking fields map to
// flags; the others exist so the tests can run a short, fast variant.
type config struct {
	Server    string        // "conn" (package conn's Handler) or "raw" (echoserver, on the poller)
	Conns     int           // client connections kept open
	Size      int           // message size in bytes
	Churn     float64       // fraction of connections closed and reopened per second
	Duration  time.Duration // how long the load runs
	Waiters   int           // poller waiters; 0 means GOMAXPROCS
	Topology  string        // "per-waiter", "shared" or "stealing"
	Reclaimer string        // "passbuck", "classic" or "epoch"
	Timeout   time.Duration // epoll_wait timeout (Options.WaitTimeout)
	Quiet     bool          // summary only
	TLS       bool          // TLS with a self-signed certificate; conn server only

	// tick is the period of the progress line and of the churn; one
	// second on the command line.
	tick time.Duration
	// ioTimeout bounds every client read and write, so that a server
	// bug shows up as an error rather than a hang.
	ioTimeout time.Duration
	// sndBuf, if > 0, sets SO_SNDBUF on accepted sockets. The tests make
	// it small so that nearly every reply is written in parts, which
	// exercises the Writable path and re-arms during a handler run.
	sndBuf int
	// stop ends the load early, as Duration's end would (the summary and
	// its checks follow): main's SIGINT or SIGTERM.
	stop <-chan struct{}
}

// defaultConfig is what `go run ./examples/echo` does with no arguments.
func defaultConfig() config {
	return config{
		Server:    "conn",
		Conns:     500,
		Size:      64,
		Churn:     0.10,
		Duration:  10 * time.Second,
		Topology:  "per-waiter",
		Reclaimer: "passbuck",
		tick:      time.Second,
		ioTimeout: 5 * time.Second,
	}
}

// classicTimeout is the epoll_wait timeout used when -reclaimer classic is
// asked for without -timeout: the classic scheme cannot work without one.
const classicTimeout = 10 * time.Millisecond

// parseFlags reads the command line into a config. Bad values are reported
// with the usage text.
func parseFlags(args []string, stderr io.Writer) (config, error) {
	cfg := defaultConfig()
	fs := flag.NewFlagSet("echo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `echo: an echo server on gracepoll (package conn, or -server raw on the
poller directly), driven by an in-process load
generator that closes and reopens connections while traffic flows, and checks
that every reply matches its request (no bytes cross between connections).
Half of the churned connections end with a reset instead of a FIN, which
takes the poller's hang-up path. It listens on 127.0.0.1 on a free port;
nothing leaves the machine.

Usage: go run ./examples/echo [flags]

Prints a progress line, the conn server's counters and the poller's
per-waiter statistics every second,
then a summary: messages/s, connections opened and closed, Delete-to-OnRelease
latency p50/p99, stale events dropped, and the correctness line. Exits 1 if
correctness fails, 2 on a setup error.

Flags:
`)
		fs.PrintDefaults()
	}
	fs.StringVar(&cfg.Server, "server", cfg.Server, "conn (a conn.Handler: examples/echo/connecho) or raw (on the poller directly: examples/echo/echoserver)")
	fs.IntVar(&cfg.Conns, "conns", cfg.Conns, "client connections kept open")
	fs.IntVar(&cfg.Size, "size", cfg.Size, "message size in bytes (try 200000: large messages exercise partial writes)")
	fs.Float64Var(&cfg.Churn, "churn", cfg.Churn, "fraction of connections closed and reopened every second (0 disables)")
	fs.DurationVar(&cfg.Duration, "duration", cfg.Duration, "how long the load runs")
	fs.IntVar(&cfg.Waiters, "waiters", cfg.Waiters, "poller waiter goroutines (0: GOMAXPROCS)")
	fs.StringVar(&cfg.Topology, "topology", cfg.Topology, "epoll sets: per-waiter, shared (one set, every waiter) or stealing (a set per waiter, a stuck waiter's work taken over)")
	fs.StringVar(&cfg.Reclaimer, "reclaimer", cfg.Reclaimer, "deferred reclaimer: passbuck, classic (pass the buck with a timeout) or epoch")
	fs.DurationVar(&cfg.Timeout, "timeout", cfg.Timeout, fmt.Sprintf("epoll_wait timeout, 0 blocks (classic needs one: %v if unset)", classicTimeout))
	fs.BoolVar(&cfg.Quiet, "quiet", cfg.Quiet, "print only the summary")
	fs.BoolVar(&cfg.TLS, "tls", cfg.TLS, "serve TLS (a self-signed certificate made at startup) to TLS clients that verify it; -server conn only")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return cfg, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if _, err := cfg.options(); err != nil {
		fs.Usage()
		return cfg, err
	}
	return cfg, nil
}

// options validates cfg and maps it to poller.Options.
func (cfg config) options() (poller.Options, error) {
	var o poller.Options
	switch {
	case cfg.Server != "conn" && cfg.Server != "raw":
		return o, fmt.Errorf("-server %q: want conn or raw", cfg.Server)
	case cfg.Conns < 1:
		return o, fmt.Errorf("-conns %d: want at least 1", cfg.Conns)
	case cfg.Size < 1:
		return o, fmt.Errorf("-size %d: want at least 1", cfg.Size)
	case cfg.Churn < 0 || cfg.Churn > 1:
		return o, fmt.Errorf("-churn %v: want 0..1", cfg.Churn)
	case cfg.Duration <= 0:
		return o, fmt.Errorf("-duration %v: want > 0", cfg.Duration)
	case cfg.Waiters < 0:
		return o, fmt.Errorf("-waiters %d: want >= 0", cfg.Waiters)
	case cfg.Timeout < 0:
		return o, fmt.Errorf("-timeout %v: want >= 0", cfg.Timeout)
	case cfg.TLS && cfg.Server != "conn":
		return o, fmt.Errorf("-tls needs -server conn: the raw poller server has no TLS")
	}
	o.Waiters = cfg.Waiters
	o.WaitTimeout = cfg.Timeout
	if err := o.Topology.UnmarshalText([]byte(cfg.Topology)); err != nil {
		return o, fmt.Errorf("-topology: %w", err)
	}
	switch cfg.Reclaimer {
	case "passbuck":
		o.Reclaimer = passbuck.Factory(passbuck.Options{})
	case "classic":
		o.Reclaimer = passbuck.Factory(passbuck.Options{Mode: passbuck.Classic})
		if o.WaitTimeout == 0 {
			o.WaitTimeout = classicTimeout
		}
	case "epoch":
		o.Reclaimer = epoch.Factory(epoch.Options{})
	default:
		return o, fmt.Errorf("-reclaimer %q: want passbuck, classic or epoch", cfg.Reclaimer)
	}
	return o, nil
}

func main() {
	cfg, err := parseFlags(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "echo:", err)
		os.Exit(2)
	}
	// Ctrl-C or SIGTERM ends the load early and still prints the
	// summary; a second one kills the program as usual.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	cfg.stop = ctx.Done()
	go func() { <-ctx.Done(); stop() }()
	res, err := run(cfg, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "echo:", err)
		os.Exit(2)
	}
	if !res.correct() {
		os.Exit(1)
	}
}
