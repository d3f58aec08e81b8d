// Command kv is a small in-memory key-value server speaking the Redis
// protocol (RESP2) on gracepoll's package conn: redis-cli and
// redis-benchmark work against it unchanged.
//
//	go run ./examples/kv -addr 127.0.0.1:6380
//	redis-cli -p 6380 set k v
//	redis-benchmark -p 6380 -q -t ping,set,get,incr,lpush,rpush,lpop,rpop,lrange,mset
//
// (redis-benchmark's other default tests need sets, hashes, sorted sets
// and streams, which kv does not keep: without -t it stops at SADD.)
//
// It serves strings and lists (PING, ECHO, SET with NX/XX/GET/EX/PX, GET,
// MGET, MSET, DEL, EXISTS, TYPE, STRLEN, INCR, DECR, INCRBY, DECRBY,
// LPUSH, RPUSH, LPOP, RPOP, LLEN, LRANGE, DBSIZE, FLUSHDB, FLUSHALL) and
// what clients send at start (COMMAND, CONFIG GET, CLIENT SETNAME and
// SETINFO, HELLO 2, INFO, SELECT 0, QUIT); HELLO 3 is refused, RESP3 is
// not spoken. Pipelined and inline commands work; a protocol error is
// answered with -ERR and the connection closed. A client that pipelines
// more than it reads is held in bounded memory (package conn's flow
// control), not disconnected, unless -maxclientout says otherwise. It
// serves until SIGINT or SIGTERM, then shuts down gracefully: it stops
// accepting and reading, answers every command already read, flushes,
// closes each connection, and after -shutdown-timeout resets what is left;
// then it prints its final statistics.
//
// -topology picks the poller's epoll sets: per-waiter (the default: a
// connection stays on one waiter, the fastest for uniform, cheap commands),
// shared (one set for every waiter: the next free waiter takes the next
// event, a waiter stuck in a slow command hands the events it had already
// taken to the others, and more waiters start when all are stuck, so a
// slow command holds up its own connection, not every connection its
// waiter serves) or stealing (a set per waiter, as per-waiter, and a
// waiter stuck in a slow command has its events and its set taken over by
// another once the poller notices, about poller.Options.Overrun later).
//
// With -tls-self-signed (or -tls-cert and -tls-key) it speaks RESP over TLS
// instead, on crypto/tls as package conn runs it, for redis-cli --tls and
// redis-benchmark --tls:
//
//	go run ./examples/kv -tls-self-signed -tls-cacert-out /tmp/kv-ca.pem
//	redis-cli --tls --cacert /tmp/kv-ca.pem -p 6380 PING
//
// -tls-client-ca requires client certificates (mutual TLS) and -tls-alpn
// offers ALPN protocols. A client that is not speaking TLS, or never
// finishes its handshake, costs a connection for -tls-handshake-timeout at
// most and is counted in the TLS line of the statistics; while
// -tls-max-handshakes handshakes are in progress, a connection whose
// first bytes arrive is reset.
//
// The parts: examples/kv/resp (the protocol), examples/kv/store (the data
// and the command table), examples/kv/kvserver (the conn.Handler).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/gracepoll/gracepoll/conn"
	"github.com/gracepoll/gracepoll/examples/kv/kvserver"
	"github.com/gracepoll/gracepoll/examples/kv/resp"
	"github.com/gracepoll/gracepoll/examples/kv/store"
	"github.com/gracepoll/gracepoll/poller"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr, nil)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "kv:", err)
		os.Exit(2)
	}
}

// run serves until ctx is done. ready, if not nil, receives the address
// bound once the server listens.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, ready chan<- net.Addr) error {
	fs := flag.NewFlagSet("kv", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "127.0.0.1:6380", "address to listen on: host:port for TCP, or a path for a Unix socket")
	waiters := fs.Int("waiters", 0, "poller waiters (0: GOMAXPROCS)")
	topology := fs.String("topology", "per-waiter", "epoll sets: per-waiter (a connection stays on one waiter), shared (one set, any free waiter takes the next event: for commands of uneven cost) or stealing (a set per waiter; a stuck waiter's work is taken over)")
	shards := fs.Int("shards", store.DefaultShards, "shards of the key space, each with its own mutex")
	maxBulk := fs.Int("max-value", resp.DefaultMaxBulk, "longest argument (value) accepted, in bytes")
	every := fs.Duration("stats", 0, "print the server's statistics this often (0: only at exit)")
	maxOut := fs.Int("maxclientout", 0, "disconnect a client with more than this many bytes of unread replies queued (0: never, as Redis's default)")
	grace := fs.Duration("shutdown-timeout", 10*time.Second, "on SIGINT or SIGTERM, how long to finish the commands already read before resetting what is left")
	var tf tlsFlags
	tf.register(fs)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "kv: an in-memory key-value server speaking the Redis protocol (RESP2) on gracepoll's package conn.\n\nUsage: go run ./examples/kv [flags]\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if *waiters < 0 || *shards < 1 || *maxBulk < 1 || *maxOut < 0 || *grace <= 0 {
		fs.Usage()
		return fmt.Errorf("-waiters, -maxclientout must be at least 0; -shards, -max-value and -shutdown-timeout positive")
	}
	var topo poller.Topology
	if err := topo.UnmarshalText([]byte(*topology)); err != nil {
		fs.Usage()
		return fmt.Errorf("-topology: %w", err)
	}
	if err := tf.check(); err != nil {
		fs.Usage()
		return err
	}
	tlsSet, err := tf.config()
	if err != nil {
		return err
	}
	defer tlsSet.close()
	st := store.New(*shards)
	h := kvserver.New(st, *maxBulk)
	h.MaxClientOut = *maxOut
	opts := h.Options()
	opts.Poller.Waiters = *waiters
	opts.Poller.Topology = topo
	if tlsSet != nil {
		opts.TLS = tlsSet.config
		opts.HandshakeTimeout = tf.handshakeTimeout
		opts.MaxHandshakes = tf.maxHandshakes
	}
	srv, err := conn.NewServer(h, opts)
	if err != nil {
		return err
	}
	network := "tcp"
	if strings.Contains(*addr, "/") {
		network = "unix"
	}
	bound, err := srv.Listen(network, *addr)
	if err != nil {
		srv.Close()
		return err
	}
	over := ""
	if tlsSet != nil {
		over = " over TLS"
	}
	fmt.Fprintf(stdout, "kv: serving RESP2 on %s %s%s with %d waiters (%s); SIGINT or SIGTERM stops it\n",
		network, bound, over, srv.Poller().Waiters(), topo)
	if tlsSet != nil {
		_, port, _ := net.SplitHostPort(bound.String())
		tlsSet.announce(stdout, port)
	}
	if ready != nil {
		ready <- bound
	}
	var tick <-chan time.Time
	if *every > 0 {
		t := time.NewTicker(*every)
		defer t.Stop()
		tick = t.C
	}
	for done := false; !done; {
		select {
		case <-ctx.Done():
			done = true
		case <-tick:
			fmt.Fprint(stdout, report(srv.Stats(), srv.Poller().Stats(), st, tlsSet != nil))
		}
	}
	sctx, cancel := context.WithTimeout(context.Background(), *grace)
	defer cancel()
	drained, forced, err := srv.Shutdown(sctx)
	if network == "unix" {
		os.Remove(*addr)
	}
	fmt.Fprintf(stdout, "kv: shut down: %s finished, %s reset after -shutdown-timeout %v\n",
		plural(uint64(drained), "connection"), plural(uint64(forced), "connection"), *grace)
	if err != nil && forced == 0 {
		fmt.Fprintf(stderr, "kv: shutdown: %v\n", err)
	}
	fmt.Fprint(stdout, report(srv.Stats(), srv.Poller().Stats(), st, tlsSet != nil))
	return nil
}

// report renders the server's counters (with secure, its TLS counters too)
// and its poller's per-waiter table, such as
//
//	kv: 3 keys; connections: 0 open, 1252 accepted; closed: peer-closed 1203, reset 49; accept pauses 0, accept errors 0; lost output 0 B
func report(s conn.ServerStats, ps poller.Stats, st *store.Store, secure bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, "kv: %s; connections: %d open, %d accepted; closed: %s; accept pauses %d, accept errors %d; lost output %d B\n",
		plural(uint64(st.Len()), "key"), s.Open, s.Accepted, counts(s.Closed), s.AcceptPauses, s.AcceptErrors, s.LostOutput)
	if secure {
		b.WriteString(tlsReport(s.TLS))
	}
	for line := range strings.Lines(ps.String()) {
		b.WriteString("    " + line)
	}
	return b.String()
}

// counts renders counters by name in alphabetical order, so that
// successive reports list them alike: "peer-closed 3, reset 2", or "none".
func counts(m map[string]uint64) string {
	if len(m) == 0 {
		return "none"
	}
	parts := make([]string, 0, len(m))
	for _, name := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %d", name, m[name]))
	}
	return strings.Join(parts, ", ")
}

// plural renders "1 key" and "2 keys".
func plural(n uint64, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
