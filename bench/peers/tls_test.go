//go:build linux

package peers

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gracepoll/gracepoll/examples/echo/loadgen"
)

// The certificate of this test binary's TLS servers, made once and
// written into the launcher's directory (removed by TestMain), where the
// children and redis-benchmark read it.
var testCert struct {
	once              sync.Once
	cert              Cert
	certFile, keyFile string
	err               error
}

// serverCert returns the TLS servers' certificate and its files.
func serverCert(tb testing.TB) (c Cert, certFile, keyFile string) {
	tb.Helper()
	testCert.once.Do(func() {
		if _, testCert.err = buildLauncher(); testCert.err != nil {
			return
		}
		if testCert.cert, testCert.err = NewCert(); testCert.err != nil {
			return
		}
		testCert.certFile, testCert.keyFile, testCert.err = testCert.cert.WriteFiles(launcher.dir)
	})
	if testCert.err != nil {
		tb.Fatal(testCert.err)
	}
	return testCert.cert, testCert.certFile, testCert.keyFile
}

// startTLSServer is startServer for a TLS server: it serves serverCert,
// and writes a CPU profile of its life to -serverprofile DIR/NAME.pprof
// if that is set.
func startTLSServer(tb testing.TB, name string, cpu int) *child {
	tb.Helper()
	_, certFile, keyFile := serverCert(tb)
	args := []string{"-cert", certFile, "-key", keyFile}
	if *serverProfileDir != "" {
		args = append(args, "-cpuprofile", filepath.Join(*serverProfileDir, name+".pprof"))
	}
	return startServer(tb, name, cpu, args...)
}

// startTLSServers starts every one of servers (startTLSServer) on cpu,
// and stops them when tb ends.
func startTLSServers(tb testing.TB, servers []Named, cpu int) []*child {
	tb.Helper()
	procs := make([]*child, len(servers))
	tb.Cleanup(func() {
		for _, c := range procs {
			if c == nil {
				continue
			}
			if err := c.stop(); err != nil {
				tb.Error(err)
			}
		}
	})
	for i, s := range servers {
		procs[i] = startTLSServer(tb, s.Name, cpu)
	}
	return procs
}

// benchClientConfig is the benchmarks' TLS client: TLS 1.3 only,
// crypto/tls's defaults otherwise, and the server's certificate pinned
// (compared byte for byte) rather than verified as a chain. The client is
// the load, not the system under test: pinning spares it the chain
// verification's signature check and path building, so one client core
// drives more handshakes, and the server's handshake is the same either
// way (the client still checks the server's signature of the handshake).
func benchClientConfig(tb testing.TB) *tls.Config {
	c, _, _ := serverCert(tb)
	kp, err := tls.X509KeyPair(c.CertPEM, c.KeyPEM)
	if err != nil {
		tb.Fatal(err)
	}
	der := kp.Certificate[0]
	return &tls.Config{
		MinVersion:         tls.VersionTLS13,
		InsecureSkipVerify: true, // replaced by the pin
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			if len(raw) != 1 || !bytes.Equal(raw[0], der) {
				return errors.New("peers: the server's certificate is not the benchmark's")
			}
			return nil
		},
	}
}

// BenchmarkTLSEcho is BenchmarkEcho for the TLS echo servers: examples/
// echo's load generator (package loadgen) over TLS 1.3 (benchClientConfig,
// crypto/tls's default key exchange), conns connections ping-ponging
// 64-byte messages, every reply checked byte for byte, the connections
// opened and handshaken before the window. Without churn: a reopened
// connection is a handshake, whose cost BenchmarkTLSHandshake measures on
// its own; here it would be a few percent of the CPU per message. It
// reports msgs/s, server-cpu-µs/msg, server-util-% and client-util-%.
func BenchmarkTLSEcho(b *testing.B) {
	cfg := benchClientConfig(b)
	echoBench(b, OfKind("tls-echo"), 0, startTLSServer, func(addr string, n int) loadgen.Config {
		return loadgen.Config{Addr: addr, Conns: n, Size: echoSize, IOTimeout: ioTimeout, TLS: cfg}
	})
}

// tlsCycle is one TLS connection: dial addr, handshake with cfg, write
// msg, read its echo into reply and check it, close (which sends
// close_notify). It returns the connection's state.
func tlsCycle(addr string, cfg *tls.Config, msg, reply []byte) (tls.ConnectionState, error) {
	c, err := tlsDial(addr, cfg)
	if err != nil {
		return tls.ConnectionState{}, err
	}
	defer c.Close()
	if err := echoOnce(c, msg, reply); err != nil {
		return tls.ConnectionState{}, err
	}
	return c.ConnectionState(), nil
}

// echoOnce writes msg on c, reads its echo into reply and checks it.
func echoOnce(c net.Conn, msg, reply []byte) error {
	if err := loadgen.RoundTrip(c, msg, reply); err != nil {
		return err
	}
	if !bytes.Equal(msg, reply) {
		return errors.New("reply differs from its request")
	}
	return nil
}

// tlsDial dials addr and completes a TLS handshake with cfg, within
// ioTimeout; the connection's deadline stays set ioTimeout from the dial.
func tlsDial(addr string, cfg *tls.Config) (*tls.Conn, error) {
	raw, err := net.DialTimeout("tcp", addr, ioTimeout)
	if err != nil {
		return nil, err
	}
	c := tls.Client(raw, cfg)
	c.SetDeadline(time.Now().Add(ioTimeout))
	if err := c.Handshake(); err != nil {
		c.Close()
		return nil, fmt.Errorf("handshake: %w", err)
	}
	return c, nil
}

// tlsCycles runs n TLS connection cycles (tlsCycle) of size-byte
// messages against addr over workers goroutines, each taking cycles from a
// shared budget so that the run ends with no straggler, and returns the
// wall time and the first error. It is loadgen's Cycler on package net,
// whose dialer sets TCP_NODELAY: a handshake's small writes in a row must
// not wait on delayed ACKs (Nagle's algorithm, 40 ms a cycle).
func tlsCycles(addr string, cfg *tls.Config, workers, n, size int) (time.Duration, error) {
	var (
		next    atomic.Int64
		wg      sync.WaitGroup
		errOnce sync.Once
		first   error
	)
	t0 := time.Now()
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			msg, reply := make([]byte, size), make([]byte, size)
			for {
				i := next.Add(1) - 1
				if i >= int64(n) {
					return
				}
				loadgen.Fill(msg, uint64(loadgen.TagMagic)<<32|uint64(i+1), uint32(w))
				if _, err := tlsCycle(addr, cfg, msg, reply); err != nil {
					errOnce.Do(func() { first = fmt.Errorf("TLS cycle %d of %d: %w", i+1, n, err) })
					next.Store(int64(n))
					return
				}
			}
		}()
	}
	wg.Wait()
	return time.Since(t0), first
}

// handshakeCases are BenchmarkTLSHandshake's handshakes, all TLS 1.3:
// full with X25519 alone, full with crypto/tls's default key exchange
// (X25519MLKEM768 first, which every server here supports), and resumed
// from a client session cache (with the default key exchange: TLS 1.3
// resumption in crypto/tls is PSK with (EC)DHE, so it skips the
// certificate and its signature, not the key exchange).
var handshakeCases = []struct {
	name   string
	curves []tls.CurveID
	resume bool
	want   tls.CurveID // the key exchange negotiated
}{
	{"full-x25519", []tls.CurveID{tls.X25519}, false, tls.X25519},
	{"full-default", nil, false, tls.X25519MLKEM768},
	{"resumed", nil, true, tls.X25519MLKEM768},
}

var handshakeWorkers = flag.Int("tls.workers", 8, "BenchmarkTLSHandshake: client goroutines, each one TLS connection at a time")

// BenchmarkTLSHandshake measures each TLS echo server's CPU time per TLS
// connection, the server in a process of its own pinned to one CPU with
// GOMAXPROCS=1 (cmd/serve), the client in this process pinned to the
// other with GOMAXPROCS=1: -tls.workers goroutines (8, tlsCycles) each
// dialling, handshaking (handshakeCases), writing 64 bytes, reading the echo back
// (checked byte for byte) and closing, b.N connections in all, after 50
// untimed ones (which fill the session cache of the resumed case). Every
// handshake is checked (tls.Config.VerifyConnection) to negotiate TLS 1.3
// with the case's key exchange and to resume only with a session cache;
// a conn server's own counters (the launcher's "tls") must show no
// failed, timed-out or refused handshake. It reports:
//
//   - handshakes/s: connections per second of wall time.
//   - server-cpu-µs/handshake: the server process's CPU time over the
//     window, its tail until it is quiet included, per connection: the
//     handshake and the accept, echo and close around it. One client core
//     does not saturate the servers (a client's handshake costs more than
//     a server's), so this, not handshakes/s, ranks them.
//   - server-util-% and client-util-%.
//   - resumed-%: the handshakes that resumed a session.
func BenchmarkTLSHandshake(b *testing.B) {
	serverCPU, ok := pinClient(b, 1)
	if !ok {
		return
	}
	servers := OfKind("tls-echo")
	procs := startTLSServers(b, servers, serverCPU)
	base := benchClientConfig(b)
	for _, hc := range handshakeCases {
		for i, s := range servers {
			srv := procs[i]
			b.Run(hc.name+"/"+s.Name, func(b *testing.B) {
				var resumed atomic.Int64
				cfg := base.Clone()
				cfg.CurvePreferences = hc.curves
				if hc.resume {
					cfg.ClientSessionCache = tls.NewLRUClientSessionCache(0)
				}
				cfg.VerifyConnection = func(st tls.ConnectionState) error {
					switch {
					case st.Version != tls.VersionTLS13:
						return fmt.Errorf("negotiated %s, want TLS 1.3", tls.VersionName(st.Version))
					case st.CurveID != hc.want:
						return fmt.Errorf("key exchange %v, want %v", st.CurveID, hc.want)
					case st.DidResume && !hc.resume:
						return errors.New("resumed without a session cache")
					case st.DidResume:
						resumed.Add(1)
					}
					return nil
				}
				b.StopTimer()
				if _, err := tlsCycles(srv.addr, cfg, *handshakeWorkers, 50, 64); err != nil {
					b.Fatalf("warm-up: %v", err)
				}
				before, err := srv.ask("tls", "tls")
				if err != nil {
					b.Fatal(err)
				}
				resumed.Store(0)
				w, err := measure(srv.Pid(), b, func() error {
					_, err := tlsCycles(srv.addr, cfg, *handshakeWorkers, b.N, 64)
					return err
				})
				if err != nil {
					b.Fatal(err)
				}
				if err := tlsStatsClean(srv, before); err != nil {
					b.Fatal(err)
				}
				n := int(resumed.Load())
				if hc.resume && n*10 < b.N*9 {
					b.Fatalf("%d of %d handshakes resumed a session, want at least 90 %%", n, b.N)
				}
				b.ReportMetric(float64(b.N)/w.wall.Seconds(), "handshakes/s")
				b.ReportMetric(w.serverCPU.Seconds()*1e6/float64(b.N), "server-cpu-µs/handshake")
				w.report(b)
				b.ReportMetric(100*float64(n)/float64(b.N), "resumed-%")
			})
		}
	}
}

// tlsStatsClean checks that a conn server's TLS counters (the launcher's
// "tls") show no failed, timed-out or refused handshake since before was
// read; servers not on conn (answering "tls none") pass.
func tlsStatsClean(srv *child, before map[string]float64) error {
	after, err := srv.ask("tls", "tls")
	if err != nil {
		return err
	}
	for _, k := range []string{"failed", "timed-out", "refused"} {
		if d := after[k] - before[k]; d != 0 {
			return fmt.Errorf("server process %d: %v more TLS handshakes %s (before %v, after %v)", srv.Pid(), d, k, before, after)
		}
	}
	return nil
}

// BenchmarkTLSIdleMemory is BenchmarkIdleMemory for the TLS echo servers
// at 10,000 connections: each connection completes a TLS 1.3 handshake
// with crypto/tls's defaults, echoes one 64-byte message (checked) and
// stays open and silent. It reports rss-B/conn and heap-B/conn, the
// growth of the server's resident set and of its Go heap in use after a
// GC, per connection. Skipped, saying so, if RLIMIT_NOFILE does not allow
// 10,000 connections on each side. Run it with -benchtime=1x.
func BenchmarkTLSIdleMemory(b *testing.B) {
	const n = 10000
	serverCPU, ok := pinClient(b, 2)
	if !ok {
		return
	}
	cfg := benchClientConfig(b)
	for _, s := range OfKind("tls-echo") {
		b.Run(fmt.Sprintf("conns=%d/%s", n, s.Name), func(b *testing.B) {
			skipUnlessFiles(b, n)
			srv := startTLSServer(b, s.Name, serverCPU)
			defer func() {
				if err := srv.stop(); err != nil {
					b.Error(err)
				}
			}()
			idleMemory(b, srv, n, func(n int) (func(), error) {
				idle, err := loadgen.OpenIdleTLS(srv.addr, n, 64, 8, ioTimeout, cfg)
				if err != nil {
					return nil, err
				}
				return idle.Close, nil
			})
		})
	}
}

// BenchmarkTLSKV's rows are at -c 50 -P 1, the common case of a TLS
// client (one request in flight per connection), where the record layer's
// cost per request shows most.
const (
	tlsKVClients  = 50
	tlsKVPipeline = 1
)

// BenchmarkTLSKV runs redis-benchmark --tls against examples/kv's server
// with conn.Options.TLS (kv-conn-tls) and the same command code on net
// behind crypto/tls's listener (kv-net-tls), as BenchmarkKV does in
// plaintext: -q -t TEST -c 50 -P 1 -n N (-kv.n), --cacert the servers'
// certificate, one run per test; after each a Go client checks the
// replies over TLS (kvCheck). It reports req/s, server-cpu-µs/req and
// server-util-%. Without redis-benchmark it is skipped, saying so. Run
// it with -benchtime=1x.
func BenchmarkTLSKV(b *testing.B) {
	rb, err := exec.LookPath("redis-benchmark")
	if err != nil {
		b.Skip("redis-benchmark is not installed (Debian: apt-get install redis-tools): the TLS kv comparison is skipped")
	}
	serverCPU, ok := pinClient(b, 2)
	if !ok {
		return
	}
	_, certFile, _ := serverCert(b)
	cfg := benchClientConfig(b)
	servers := OfKind("tls-kv")
	procs := startTLSServers(b, servers, serverCPU)
	for _, test := range kvTests {
		for i, s := range servers {
			srv := procs[i]
			b.Run(fmt.Sprintf("c=%d/P=%d/%s/%s", tlsKVClients, tlsKVPipeline, test, s.Name), func(b *testing.B) {
				n := *kvRequests
				kvRow(b, srv, func() (float64, error) {
					return redisBenchmark(rb, srv.addr, test, tlsKVClients, tlsKVPipeline, n, "--tls", "--cacert", certFile)
				}, n, func() error { return kvCheckTLS(srv.addr, cfg, test == "SET") })
			})
		}
	}
}

// kvCheckTLS is kvCheck over TLS.
func kvCheckTLS(addr string, cfg *tls.Config, setDone bool) error {
	c, err := tlsDial(addr, cfg)
	if err != nil {
		return err
	}
	return kvCheckOn(c, setDone)
}

// TestTLSServers checks every TLS server in its own process: an echo
// server answers one TLS round trip, verified against the certificate as
// a chain (Cert.ClientConfig), over TLS 1.3 with crypto/tls's default key
// exchange, then resumes a session and speaks TLS 1.2; a kv server
// answers kvCheck over TLS.
func TestTLSServers(t *testing.T) {
	if testing.Short() {
		t.Skip("builds cmd/serve")
	}
	c, _, _ := serverCert(t)
	chain, err := c.ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range OfKind("tls-echo") {
		t.Run(s.Name, func(t *testing.T) {
			srv := startTLSServer(t, s.Name, -1)
			defer func() {
				if err := srv.stop(); err != nil {
					t.Error(err)
				}
			}()
			msg, reply := make([]byte, 64), make([]byte, 64)
			loadgen.Fill(msg, uint64(loadgen.TagMagic)<<32|1, 1)
			cfg := chain.Clone()
			cfg.ClientSessionCache = tls.NewLRUClientSessionCache(0)
			st, err := tlsCycle(srv.addr, cfg, msg, reply)
			if err != nil {
				t.Fatal(err)
			}
			if st.Version != tls.VersionTLS13 || st.CurveID != tls.X25519MLKEM768 || st.DidResume {
				t.Errorf("first connection: %s, %v, resumed %v; want TLS 1.3, X25519MLKEM768, not resumed",
					tls.VersionName(st.Version), st.CurveID, st.DidResume)
			}
			if st, err = tlsCycle(srv.addr, cfg, msg, reply); err != nil {
				t.Fatal(err)
			} else if !st.DidResume {
				t.Error("second connection with a session cache did not resume")
			}
			tls12 := chain.Clone()
			tls12.MaxVersion = tls.VersionTLS12
			if st, err = tlsCycle(srv.addr, tls12, msg, reply); err != nil {
				t.Fatalf("TLS 1.2: %v", err)
			} else if st.Version != tls.VersionTLS12 {
				t.Errorf("TLS 1.2 client: negotiated %s", tls.VersionName(st.Version))
			}
			// Large messages on a few connections at once: records split
			// across reads, output queued past the socket's buffer.
			if err := tlsLarge(srv.addr, chain, 4, 5, 200_000); err != nil {
				t.Error(err)
			}
			if err := tlsStatsClean(srv, map[string]float64{}); err != nil {
				t.Error(err)
			}
			// The load generator of BenchmarkTLSEcho, with churn, which
			// may reset a connection before the server has read the
			// client's Finished: a failed handshake, the client's doing.
			genCheck(t, loadgen.Config{Addr: srv.addr, Conns: 4, Size: 64, IOTimeout: ioTimeout, TLS: benchClientConfig(t)})
		})
	}
	for _, s := range OfKind("tls-kv") {
		t.Run(s.Name, func(t *testing.T) {
			srv := startTLSServer(t, s.Name, -1)
			defer func() {
				if err := srv.stop(); err != nil {
					t.Error(err)
				}
			}()
			if err := kvCheckTLS(srv.addr, chain, false); err != nil {
				t.Error(err)
			}
		})
	}
}

// tlsLarge runs conns TLS connections to addr at once, each echoing n
// messages of size bytes, checked byte for byte.
func tlsLarge(addr string, cfg *tls.Config, conns, n, size int) error {
	errs := make(chan error, conns)
	for i := range conns {
		go func() {
			errs <- func() error {
				c, err := tlsDial(addr, cfg)
				if err != nil {
					return err
				}
				defer c.Close()
				msg, reply := make([]byte, size), make([]byte, size)
				for seq := range n {
					loadgen.Fill(msg, uint64(loadgen.TagMagic)<<32|uint64(i+1), uint32(seq))
					if err := echoOnce(c, msg, reply); err != nil {
						return fmt.Errorf("connection %d, message %d of %d bytes: %w (%d bytes from other connections)",
							i+1, seq+1, size, err, loadgen.ForeignBytes(reply, uint32(i+1)))
					}
				}
				return nil
			}()
		}()
	}
	var first error
	for range conns {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}
