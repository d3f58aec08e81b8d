//go:build linux

package peers

import (
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"os/exec"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

var httpTLSHandshakes = flag.Int("http.tls.handshakes", 3000, "BenchmarkHTTPTLS: TLS connections per handshake cell, server and round")

// BenchmarkHTTPTLS compares HTTP over TLS on gracepoll's httpd
// (Server.TLSConfig: crypto/tls inside package conn) and on net/http
// behind crypto/tls's listener (Kind "tls-http"), each server in a
// process of its own pinned to the first CPU with GOMAXPROCS=1
// (cmd/serve), the client pinned to the second. For each of -http.rounds
// rounds, each server in turn:
//
//   - handshake/SERVER: -http.tls.handshakes connections over
//     -tls.workers goroutines, each dialling, completing a TLS 1.3
//     handshake with crypto/tls's default key exchange (benchClientConfig:
//     the certificate pinned, not verified as a chain), sending GET
//     /plaintext, checking the answer and closing; after 50 unmeasured
//     ones. It reports handshakes/s and cpu-µs/handshake: the server's
//     CPU time per connection, the accept, the request and the close
//     around the handshake included; httpd's own counters (the
//     launcher's "tls") must show no failed, timed-out or refused
//     handshake.
//   - keepalive/c=50/SERVER: BenchmarkHTTP's plaintext row over TLS, wrk
//     -t1 -c50 on https (OpenSSL, TLS 1.3, the handshakes before the
//     window's bulk), with the same checks and metrics.
//
// The measurement ignores b.N: run it with -benchtime=1x.
func BenchmarkHTTPTLS(b *testing.B) {
	_, clientCPU, err := twoCPUs()
	if err != nil {
		b.Skip(err)
	}
	serverCPU, ok := pinClient(b, 1)
	if !ok {
		return
	}
	_, hasWrk := exec.LookPath("wrk")
	base := benchClientConfig(b)
	base.VerifyConnection = func(st tls.ConnectionState) error {
		if st.Version != tls.VersionTLS13 {
			return fmt.Errorf("negotiated %s, want TLS 1.3", tls.VersionName(st.Version))
		}
		return nil
	}
	for range *httpRounds {
		for _, s := range httpServers("tls-http") {
			b.Run("handshake/"+s.Name, func(b *testing.B) {
				srv := startTLSServer(b, s.Name, serverCPU)
				defer func() {
					if err := srv.stop(); err != nil {
						b.Error(err)
					}
				}()
				if _, err := httpTLSCycles(srv.addr, base, *handshakeWorkers, 50); err != nil {
					b.Fatalf("warm-up: %v", err)
				}
				before, err := srv.ask("tls", "tls")
				if err != nil {
					b.Fatal(err)
				}
				n := *httpTLSHandshakes
				var steal time.Duration
				w, err := measure(srv.Pid(), b, func() error {
					s0, err := stealTime(serverCPU, clientCPU)
					if err != nil {
						return err
					}
					if _, err := httpTLSCycles(srv.addr, base, *handshakeWorkers, n); err != nil {
						return err
					}
					s1, err := stealTime(serverCPU, clientCPU)
					steal = s1 - s0
					return err
				})
				if err != nil {
					b.Fatal(err)
				}
				if err := tlsStatsClean(srv, before); err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(n)/w.wall.Seconds(), "handshakes/s")
				b.ReportMetric(w.serverCPU.Seconds()*1e6/float64(n), "cpu-µs/handshake")
				b.ReportMetric(100*steal.Seconds()/w.wall.Seconds(), "steal-%")
				w.report(b)
			})
		}
		for _, s := range httpServers("tls-http") {
			b.Run("keepalive/c=50/"+s.Name, func(b *testing.B) {
				if hasWrk != nil {
					b.Skip("wrk is not installed (Debian: wrk): skipped")
				}
				srv := startTLSServer(b, s.Name, serverCPU)
				defer func() {
					if err := srv.stop(); err != nil {
						b.Error(err)
					}
				}()
				wrkCell(b, srv, "https", httpRow{"plaintext/c=50", RoutePlaintext, 50, 1}, serverCPU, clientCPU)
			})
		}
	}
}

// httpTLSCycles runs n TLS connections against addr over workers
// goroutines, each taking connections from a shared budget: dial,
// handshake with cfg, GET /plaintext (answer checked), close. It returns
// the wall time and the first error.
func httpTLSCycles(addr string, cfg *tls.Config, workers, n int) (time.Duration, error) {
	var (
		next    atomic.Int64
		wg      sync.WaitGroup
		errOnce sync.Once
		first   error
	)
	req := RoutePlaintext.Request(addr)
	t0 := time.Now()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 0, 4096)
			for {
				i := next.Add(1) - 1
				if i >= int64(n) {
					return
				}
				err := httpTLSCycle(addr, cfg, req, buf)
				if err != nil {
					errOnce.Do(func() { first = fmt.Errorf("TLS connection %d of %d: %w", i+1, n, err) })
					next.Store(int64(n))
					return
				}
			}
		}()
	}
	wg.Wait()
	return time.Since(t0), first
}

// httpTLSCycle is one connection of httpTLSCycles.
func httpTLSCycle(addr string, cfg *tls.Config, req, buf []byte) error {
	c, err := tlsDial(addr, cfg)
	if err != nil {
		return err
	}
	defer c.Close()
	r, err := roundTripHTTP(c, req, buf)
	if err != nil {
		return err
	}
	if err := RoutePlaintext.Check(r); err != nil {
		return err
	}
	if !c.ConnectionState().HandshakeComplete {
		return errors.New("handshake not complete")
	}
	return nil
}
