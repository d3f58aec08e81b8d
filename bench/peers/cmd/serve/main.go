//go:build linux

// Command serve runs one of the servers of bench/peers in a process of its
// own, for the benchmarks: the server on one core, the client on another,
// so that neither steals CPU from the other and the server's CPU time and
// memory can be read from outside.
//
//	GOMAXPROCS=1 serve -server gracepoll-conn -cpu 0 [-cpuprofile f] [-memprofile f]
//	GOMAXPROCS=1 serve -server conn-tls -cert cert.pem -key key.pem -cpu 0
//
// A TLS server (conn-tls, net-tls, nbio-tls, kv-conn-tls, kv-net-tls,
// httpd-tls, net/http-tls, httpd-h2, net/http-h2, fasthttp-tls)
// serves the PEM certificate and key in the files -cert and -key (the
// benchmarks write them with peers.Cert.WriteFiles).
//
// It pins every thread of the process to the CPU given by -cpu (-1 leaves
// the affinity alone), starts the server on 127.0.0.1 on a free port and
// prints "addr 127.0.0.1:port" on stdout. Then it answers lines on stdin,
// one line on stdout each:
//
//	mem      "mem heap-inuse=N heap-objects=N goroutines=N total-alloc=N
//	         mallocs=N" after a GC (runtime.ReadMemStats: the Go heap the
//	         server keeps, and the bytes and objects it has allocated
//	         since it started)
//	reset    "ok": starts a new statistics window of the server's poller
//	         (poller.ResetStats), if it has one
//	poller   "poller waiters=N running=N grown=N handed-off=N wakeups=N
//	         events=N": the poller's waiters started and running now,
//	         extra waiters started while all were blocked, events handed
//	         off, epoll_wait returns and OnEvent calls (poller.Stats), or
//	         "poller none" for a server without a poller
//	latency  "latency samples=N p50-ns=N p99-ns=N max-ns=N": the poller's
//	         release latencies (Delete to the start of the release, which
//	         is OnClose for a conn server) since the last reset, or
//	         "latency none" for a server without a poller
//	heap F   "ok": writes the heap profile (pprof's "heap", after a GC) to
//	         file F; with -memprofile every allocation is in it, so that
//	         the bytes in use per connection can be read from it
//	tls      "tls handshakes=N failed=N timed-out=N refused=N in-progress=N
//	         p50-ns=N p99-ns=N": a conn server's TLS handshake counters
//	         (conn.ServerStats.TLS; failed is the sum over causes), or
//	         "tls none" for a server not on package conn
//	stats    "stats " and one line of JSON, Stats: the poller's
//	         statistics (poller.Stats: release latency since the last
//	         reset, registrations released and not yet free, waiters)
//	         and a conn server's counters (conn.ServerStats), each
//	         omitted for a server without one
//
// It serves until its stdin reaches end-of-file (the parent closed it or
// died) or it receives SIGTERM or SIGINT. Then it closes the server and
// exits 0. Errors go to stderr with exit status 1 (2 for bad flags).
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"strings"
	"syscall"

	"github.com/gracepoll/gracepoll/bench/peers"
	"github.com/gracepoll/gracepoll/conn"
	"github.com/gracepoll/gracepoll/poller"
)

func main() {
	name := flag.String("server", "", "the server to run: "+strings.Join(peers.Names(), ", "))
	cpu := flag.Int("cpu", -1, "pin the process to this CPU (-1: do not pin)")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the server's whole run to this file")
	memprofile := flag.String("memprofile", "", "write an allocation profile of the server's whole run to this file at exit")
	certFile := flag.String("cert", "", "a TLS server's certificate, PEM")
	keyFile := flag.String("key", "", "a TLS server's private key, PEM")
	flag.Parse()
	if *cpu >= 0 {
		// Before the server starts any goroutine that could block a
		// thread elsewhere: every thread now, and so every later one.
		if err := peers.PinProcessToCPU(*cpu); err != nil {
			fatal(fmt.Errorf("pin to CPU %d: %w", *cpu, err))
		}
	}
	s, ok := peers.Lookup(*name)
	if !ok {
		fmt.Fprintf(os.Stderr, "serve: unknown server %q (known: %s)\n", *name, strings.Join(peers.Names(), ", "))
		os.Exit(2)
	}
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			fatal(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fatal(err)
		}
		defer func() {
			pprof.StopCPUProfile()
			if err := f.Close(); err != nil {
				fatal(err)
			}
		}()
	}
	if *memprofile != "" {
		// Every allocation sampled, so that a per-connection figure is
		// exact; set before the server allocates anything.
		runtime.MemProfileRate = 1
		defer func() {
			f, err := os.Create(*memprofile)
			if err != nil {
				fatal(err)
			}
			if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
				fatal(err)
			}
			if err := f.Close(); err != nil {
				fatal(err)
			}
		}()
	}
	var srv peers.Server
	var err error
	if s.StartTLS != nil {
		if *certFile == "" || *keyFile == "" {
			fmt.Fprintf(os.Stderr, "serve: %s is a TLS server: it needs -cert and -key\n", s.Name)
			os.Exit(2)
		}
		var c peers.Cert
		if c, err = peers.LoadCert(*certFile, *keyFile); err == nil {
			srv, err = s.StartTLS(c)
		}
	} else {
		srv, err = s.Start()
	}
	if err != nil {
		fatal(fmt.Errorf("start %s: %w", s.Name, err))
	}
	if _, err := fmt.Printf("addr %s\n", srv.Addr()); err != nil {
		srv.Close()
		fatal(err)
	}

	stop := make(chan string, 2)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	go func() { stop <- (<-sig).String() }()
	go func() {
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			fmt.Println(answer(srv, sc.Text()))
		}
		stop <- "end of stdin"
	}()
	<-stop
	signal.Stop(sig)
	if err := srv.Close(); err != nil {
		fmt.Fprintf(os.Stderr, "serve: close %s: %v\n", s.Name, err)
	}
}

// Stats is the answer to "stats", after the word: what the server has of
// poller.Stats and conn.ServerStats, as JSON.
type Stats struct {
	Poller *poller.Stats     `json:"poller,omitempty"`
	Server *conn.ServerStats `json:"server,omitempty"`
}

// answer runs one command of the stdin protocol.
func answer(srv peers.Server, cmd string) string {
	ps, hasPoller := srv.(peers.PollerServer)
	// httpd's poller exists once it has started serving.
	hasPoller = hasPoller && ps.Poller() != nil
	if file, ok := strings.CutPrefix(strings.TrimSpace(cmd), "heap "); ok {
		if err := writeHeapProfile(file); err != nil {
			return "error " + err.Error()
		}
		return "ok"
	}
	switch strings.TrimSpace(cmd) {
	case "mem":
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		waiters := 0
		if hasPoller {
			waiters = len(ps.Poller().Stats().Waiters)
		}
		return fmt.Sprintf("mem heap-inuse=%d heap-objects=%d goroutines=%d total-alloc=%d mallocs=%d stack-inuse=%d heap-sys=%d heap-released=%d waiters-started=%d",
			m.HeapInuse, m.HeapObjects, runtime.NumGoroutine(), m.TotalAlloc, m.Mallocs, m.StackInuse, m.HeapSys, m.HeapReleased, waiters)
	case "reset":
		if hasPoller {
			ps.Poller().ResetStats()
		}
		return "ok"
	case "poller":
		if !hasPoller {
			return "poller none"
		}
		st := ps.Poller().Stats()
		running := 0
		for _, w := range st.Waiters {
			if w.Running {
				running++
			}
		}
		return fmt.Sprintf("poller waiters=%d running=%d grown=%d handed-off=%d wakeups=%d events=%d",
			len(st.Waiters), running, st.Grown, st.HandedOff, st.Wakeups, st.Events)
	case "latency":
		if !hasPoller {
			return "latency none"
		}
		l := ps.Poller().Stats().ReleaseLatency
		return fmt.Sprintf("latency samples=%d p50-ns=%d p99-ns=%d max-ns=%d", l.Samples, l.P50.Nanoseconds(), l.P99.Nanoseconds(), l.Max.Nanoseconds())
	case "stats":
		var st Stats
		if hasPoller {
			p := ps.Poller().Stats()
			st.Poller = &p
		}
		if cs, ok := srv.(interface{ Stats() conn.ServerStats }); ok {
			c := cs.Stats()
			st.Server = &c
		}
		b, err := json.Marshal(st)
		if err != nil {
			return "error " + err.Error()
		}
		return "stats " + string(b)
	case "tls":
		cs, ok := srv.(interface{ Stats() conn.ServerStats })
		if !ok {
			return "tls none"
		}
		t := cs.Stats().TLS
		var failed uint64
		for _, n := range t.Failed {
			failed += n
		}
		return fmt.Sprintf("tls handshakes=%d failed=%d timed-out=%d refused=%d in-progress=%d p50-ns=%d p99-ns=%d",
			t.Handshakes, failed, t.TimedOut, t.Refused, t.InProgress, t.P50.Nanoseconds(), t.P99.Nanoseconds())
	}
	return "error unknown command " + fmt.Sprintf("%q", cmd)
}

// writeHeapProfile writes the heap profile, of the heap as the last GC
// left it, to file.
func writeHeapProfile(file string) error {
	runtime.GC()
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "serve:", err)
	os.Exit(1)
}
