//go:build linux

package peers

import (
	"fmt"
	"net"
	"sync"
	"testing"
	"time"
)

// BenchmarkHTTPIdleMemory is BenchmarkIdleMemory for the HTTP servers
// (Kind "http"): at 1,000 and 10,000 connections, each of which has
// completed one GET /plaintext (answer checked, see openIdleHTTP) and
// stays open, keep-alive and silent. The server runs in a process of its
// own pinned to one CPU with GOMAXPROCS=1 (cmd/serve). It reports
// rss-B/conn (VmRSS of /proc/<pid>/status), heap-B/conn (the Go heap in
// use after a GC) and goroutines/conn: the growth of the server process's
// runtime.NumGoroutine, which the launcher reads in the process itself
// ("mem"), per connection: the goroutines a server parks per idle
// connection (the threads of /proc/<pid>/status are not goroutines). The
// servers' idle timeouts (net/http none, nbio 120 s, hertz 3 min, httpd
// 60 s) are longer than the measurement. 10,000 is skipped, saying so,
// if RLIMIT_NOFILE does not allow it; Go's runtime raises the soft limit
// to the hard one at start, in this process and in the server's. Run it
// with -benchtime=1x.
func BenchmarkHTTPIdleMemory(b *testing.B) {
	serverCPU, ok := pinClient(b, 2)
	if !ok {
		return
	}
	for _, n := range idleCounts {
		for _, s := range httpServers("http") {
			b.Run(fmt.Sprintf("conns=%d/%s", n, s.Name), func(b *testing.B) {
				skipUnlessFiles(b, n)
				srv := startServer(b, s.Name, serverCPU)
				defer func() {
					if err := srv.stop(); err != nil {
						b.Error(err)
					}
				}()
				idleMemory(b, srv, n, func(n int) (func(), error) { return openIdleHTTP(srv.addr, n) })
			})
		}
	}
}

// openIdleHTTP opens n connections to addr, eight at a time, each sending
// GET /plaintext and reading its answer (checked, and nothing after it),
// and leaves them open; closeAll closes them.
func openIdleHTTP(addr string, n int) (closeAll func(), err error) {
	conns := make([]net.Conn, n)
	closeAll = func() {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
	}
	var (
		mu    sync.Mutex
		first error
		next  int
		wg    sync.WaitGroup
	)
	req := RoutePlaintext.Request(addr)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 0, 4096)
			for {
				mu.Lock()
				i := next
				next++
				stop := first != nil || i >= n
				mu.Unlock()
				if stop {
					return
				}
				c, err := openOneHTTP(addr, req, buf)
				mu.Lock()
				conns[i] = c
				if err != nil && first == nil {
					first = fmt.Errorf("connection %d of %d: %w", i+1, n, err)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if first != nil {
		closeAll()
		return nil, first
	}
	return closeAll, nil
}

// openOneHTTP dials addr, sends req (GET /plaintext) and checks the
// answer; the connection it returns has no deadline left, so it stays
// open as long as the server keeps it.
func openOneHTTP(addr string, req, buf []byte) (net.Conn, error) {
	c, err := net.DialTimeout("tcp", addr, ioTimeout)
	if err != nil {
		return nil, err
	}
	c.SetDeadline(time.Now().Add(ioTimeout))
	r, err := roundTripHTTP(c, req, buf)
	if err == nil {
		err = RoutePlaintext.Check(r)
	}
	if err == nil {
		err = c.SetDeadline(time.Time{})
	}
	if err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}
