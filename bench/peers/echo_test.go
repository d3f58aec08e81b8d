//go:build linux

package peers

import (
	"fmt"
	"testing"

	"github.com/gracepoll/gracepoll/examples/echo/loadgen"
)

// The load of the echo comparison: examples/echo's defaults (64-byte
// messages, 10 % of the connections closed and reopened every second, half
// of them by a reset) at 50 and 500 connections.
var echoConns = []int{50, 500}

const (
	echoSize  = 64
	echoChurn = 0.10
)

// BenchmarkEcho runs examples/echo's load generator (package loadgen)
// against every echo server, each in a process of its own pinned to one CPU
// with GOMAXPROCS=1 (cmd/serve), the client in this process pinned to the
// other CPU with GOMAXPROCS=1: conns connections ping-pong echoSize-byte
// messages, b.N round trips in all, every reply checked byte for byte, while
// echoChurn of the connections are closed and reopened per second. It
// reports:
//
//   - msgs/s: round trips per second of wall time.
//   - server-cpu-µs/msg: the server process's CPU time (user and system,
//     all threads) over the window, its tail until it is quiet included,
//     per round trip; where one client core cannot saturate the server
//     this, not msgs/s, ranks the servers.
//   - server-util-% and client-util-%: each side's CPU time over the wall
//     time; near 100 that side was the bottleneck.
func BenchmarkEcho(b *testing.B) {
	start := func(tb testing.TB, name string, cpu int) *child { return startServer(tb, name, cpu) }
	echoBench(b, OfKind("echo"), echoChurn, start, func(addr string, n int) loadgen.Config {
		return loadgen.Config{Addr: addr, Conns: n, Size: echoSize, IOTimeout: ioTimeout}
	})
}

// echoBench runs BenchmarkEcho's measurement against servers, each started
// by start on the server CPU, with the load generator config returns for
// a server's address and n connections (echoConns), reopening churn of
// the connections per second.
func echoBench(b *testing.B, servers []Named, churn float64, start func(tb testing.TB, name string, cpu int) *child, config func(addr string, n int) loadgen.Config) {
	serverCPU, ok := pinClient(b, 1)
	if !ok {
		return
	}
	for _, n := range echoConns {
		for _, s := range servers {
			srv := start(b, s.Name, serverCPU)
			g, err := loadgen.New(config(srv.addr, n))
			if err != nil {
				b.Fatal(err)
			}
			b.Run(fmt.Sprintf("conns=%d/%s", n, s.Name), func(b *testing.B) {
				if g.Open() == 0 { // dial outside the window
					if _, err := g.RunN(int64(n), 0); err != nil {
						b.Fatal(err)
					}
				}
				b.ResetTimer()
				w, err := measure(srv.Pid(), b, func() error {
					_, err := g.RunN(int64(b.N), churn)
					return err
				})
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(b.N)/w.wall.Seconds(), "msgs/s")
				b.ReportMetric(w.serverCPU.Seconds()*1e6/float64(b.N), "server-cpu-µs/msg")
				w.report(b)
			})
			g.Close()
			if err := srv.stop(); err != nil {
				b.Error(err)
			}
		}
	}
}

// TestServers checks that every echo server echoes correctly in its own
// process, small and large messages, with churn and connection cycles.
func TestServers(t *testing.T) {
	if testing.Short() {
		t.Skip("builds cmd/serve")
	}
	for _, s := range OfKind("echo") {
		t.Run(s.Name, func(t *testing.T) {
			srv := startServer(t, s.Name, -1)
			defer srv.stop()
			for _, size := range []int{64, 200_000} {
				genCheck(t, loadgen.Config{Addr: srv.addr, Conns: 4, Size: size, IOTimeout: ioTimeout})
			}
			d, err := loadgen.NewCycler(srv.addr, ioTimeout)
			if err != nil {
				t.Fatal(err)
			}
			if _, _, err := d.Run(4, 40, 64); err != nil {
				t.Error(err)
			}
		})
	}
}

// genCheck runs 40 round trips with a load generator of cfg while two of
// its connections close and reopen, every reply checked.
func genCheck(t *testing.T, cfg loadgen.Config) {
	t.Helper()
	g, err := loadgen.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	g.Churn(2)
	if _, err := g.RunN(40, 0); err != nil {
		t.Error(err)
	}
}
