//go:build linux

// Command echoserve runs one of the echo servers of bench/peers in a process
// of its own, for BenchmarkConnCycle: the server on one core, the client on
// another, so that neither steals CPU from the other and the server's CPU
// time per connection can be read from outside.
//
//	GOMAXPROCS=1 echoserve -server gracepoll-per-waiter -cpu 0 [-cpuprofile f]
//
// It pins every thread of the process to the CPU given by -cpu (-1 leaves
// the affinity alone), starts the server on 127.0.0.1 on a free port,
// prints "addr 127.0.0.1:port" on stdout, and serves until its stdin reaches
// end-of-file (the parent closed it or died) or it receives SIGTERM or
// SIGINT. Then it closes the server and exits 0. Errors go to stderr with
// exit status 1 (2 for bad flags).
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"
	"strings"
	"syscall"

	"github.com/gracepoll/gracepoll/bench/peers"
)

func main() {
	name := flag.String("server", "", "the server to run: "+strings.Join(peers.Names(), ", "))
	cpu := flag.Int("cpu", -1, "pin the process to this CPU (-1: do not pin)")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the server's whole run to this file")
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
		fmt.Fprintf(os.Stderr, "echoserve: unknown server %q (known: %s)\n", *name, strings.Join(peers.Names(), ", "))
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
	srv, err := s.Start()
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
		io.Copy(io.Discard, os.Stdin)
		stop <- "end of stdin"
	}()
	<-stop
	signal.Stop(sig)
	if err := srv.Close(); err != nil {
		fmt.Fprintf(os.Stderr, "echoserve: close %s: %v\n", s.Name, err)
	}
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "echoserve:", err)
	os.Exit(1)
}
