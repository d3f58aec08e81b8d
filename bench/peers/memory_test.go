//go:build linux

package peers

import (
	"fmt"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gracepoll/gracepoll/examples/echo/loadgen"
)

// idleCounts are the numbers of idle connections BenchmarkIdleMemory
// holds open.
var idleCounts = []int{1000, 10000}

// BenchmarkIdleMemory measures what each echo server keeps per idle
// connection. The server runs in a process of its own pinned to one CPU
// with GOMAXPROCS=1 (cmd/serve); after a warm-up (64 connections opened,
// echoed once and closed) the benchmark reads the server's resident set
// (VmRSS of /proc/<pid>/status) and its Go heap in use after a GC (the
// launcher's "mem": runtime.ReadMemStats' HeapInuse), opens n connections
// that each echo one 64-byte message (checked) and then stay open and
// silent, waits until the server is quiet and reads both again. It reports
// the differences per connection, rss-B/conn and heap-B/conn, and the
// growth of the server's goroutine count (runtime.NumGoroutine in the
// launcher) per connection, goroutines/conn. Every server
// here is Go, so the heap is known for each; RSS counts what the heap does
// not (goroutine stacks, for net), but not the kernel's socket and epoll
// memory, the same for every server.
//
// Each side needs about n file descriptors: n at 10,000 is skipped, saying
// so, if RLIMIT_NOFILE does not allow it. Run it with -benchtime=1x.
func BenchmarkIdleMemory(b *testing.B) {
	serverCPU, ok := pinClient(b, 2)
	if !ok {
		return
	}
	for _, n := range idleCounts {
		for _, s := range OfKind("echo") {
			b.Run(fmt.Sprintf("conns=%d/%s", n, s.Name), func(b *testing.B) {
				skipUnlessFiles(b, n)
				srv := startServer(b, s.Name, serverCPU)
				defer func() {
					if err := srv.stop(); err != nil {
						b.Error(err)
					}
				}()
				idleMemory(b, srv, n, func(n int) (func(), error) {
					idle, err := loadgen.OpenIdle(srv.addr, n, 64, 8, ioTimeout)
					if err != nil {
						return nil, err
					}
					return idle.Close, nil
				})
			})
		}
	}
}

// skipUnlessFiles skips b, saying so, unless RLIMIT_NOFILE allows n
// connections, about n+256 open files, on each side. The Go runtime raises
// the soft limit to the hard one at start, in this process and in the
// server's.
func skipUnlessFiles(b *testing.B, n int) {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		b.Fatal(err)
	}
	if need := uint64(n + 256); lim.Cur < need || lim.Max < need {
		b.Skipf("%d connections need about %d open files on each side; RLIMIT_NOFILE is %d (hard %d): skipped",
			n, need, lim.Cur, lim.Max)
	}
}

// idleMemory is BenchmarkIdleMemory's measurement of server srv, for
// connections that open(n) opens, each echoing one 64-byte message before
// it goes idle, and closes with the function it returns: a warm-up of 64 connections, opened and closed, then per
// b.N iteration the growth of srv's RSS and of its Go heap in use after a
// GC over n idle connections, and of its goroutines, reported per
// connection as rss-B/conn, heap-B/conn and goroutines/conn.
func idleMemory(b *testing.B, srv *child, n int, open func(n int) (closeAll func(), err error)) {
	warm, err := open(64)
	if err != nil {
		b.Fatal(err)
	}
	warm()
	var rss, heap, gs float64
	b.ResetTimer()
	// snapshot waits until the server is quiet and reads its Go heap in
	// use after a GC, its goroutine count and its RSS.
	snapshot := func() (heap, goroutines, rss float64) {
		if err := quiet(srv.Pid()); err != nil {
			b.Fatal(err)
		}
		mem, err := srv.ask("mem", "mem")
		if err != nil {
			b.Fatal(err)
		}
		r, err := vmRSS(srv.Pid())
		if err != nil {
			b.Fatal(err)
		}
		return mem["heap-inuse"], mem["goroutines"], float64(r)
	}
	for range b.N {
		b.StopTimer()
		heap0, gs0, rss0 := snapshot()
		b.StartTimer()
		idle, err := open(n)
		b.StopTimer()
		if err != nil {
			b.Fatal(err)
		}
		heap1, gs1, rss1 := snapshot()
		idle()
		rss += (rss1 - rss0) / float64(n)
		heap += (heap1 - heap0) / float64(n)
		gs += (gs1 - gs0) / float64(n)
	}
	b.ReportMetric(rss/float64(b.N), "rss-B/conn")
	b.ReportMetric(heap/float64(b.N), "heap-B/conn")
	b.ReportMetric(gs/float64(b.N), "goroutines/conn")
}
