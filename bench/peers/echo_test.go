//go:build linux

package peers

import (
	"testing"

	"github.com/gracepoll/gracepoll/examples/echo/echoserver"
	"github.com/gracepoll/gracepoll/poller"
)

// servers are the echo servers compared, each with its default or usual
// production configuration on this machine's cores.
var servers = []struct {
	name  string
	start func() (Server, error)
}{
	// The examples/echo server itself: default options (per-waiter sets),
	// and one shared set.
	{"gracepoll-shared", func() (Server, error) { return echoserver.New(poller.Options{Topology: poller.Shared}, 0) }},
	{"gracepoll-per-waiter", func() (Server, error) { return echoserver.New(poller.Options{}, 0) }},
	{"net", func() (Server, error) { return NewNetEcho() }},
	{"gnet", func() (Server, error) { return NewGnetEcho() }},
	{"netpoll", func() (Server, error) { return NewNetpollEcho() }},
}

// The load of examples/echo's defaults: 500 connections, 64-byte messages.
const (
	benchConns   = 500
	benchSize    = 64
	churnWorkers = 8 // concurrent dial-echo-close loops
)

// BenchmarkEcho runs one client against every server:
//
//   - pingpong: benchConns connections each sending a benchSize message and
//     waiting for its reply, b.N round trips in all; reports msgs/s.
//   - churn: churnWorkers goroutines each dialling, echoing one message and
//     closing, b.N connections in all; reports conns/s.
//
// Every reply is checked byte for byte; a mismatch fails the benchmark.
// Client and server share the machine's cores, as they do in
// examples/echo, so the client's own cost is in every figure alike.
func BenchmarkEcho(b *testing.B) {
	for _, s := range servers {
		b.Run(s.name, func(b *testing.B) {
			srv, err := s.start()
			if err != nil {
				b.Fatal(err)
			}
			defer srv.Close()
			pool, err := Dial(srv.Addr(), benchConns, benchSize)
			if err != nil {
				b.Fatal(err)
			}
			defer pool.Close()
			b.Run("pingpong", func(b *testing.B) {
				r, err := pool.PingPong(int64(b.N))
				check(b, r, err)
				b.ReportMetric(float64(r.Ops)/r.Elapsed.Seconds(), "msgs/s")
			})
			b.Run("churn", func(b *testing.B) {
				r, err := Churn(srv.Addr(), churnWorkers, benchSize, int64(b.N))
				check(b, r, err)
				b.ReportMetric(float64(r.Ops)/r.Elapsed.Seconds(), "conns/s")
			})
		})
	}
}

func check(tb testing.TB, r Result, err error) {
	tb.Helper()
	if err != nil {
		tb.Fatal(err)
	}
	if r.Mismatches > 0 {
		tb.Fatalf("%d replies differ from their requests", r.Mismatches)
	}
}

// TestServers checks that every server echoes correctly, small and large
// messages, with connections opened and closed; it takes well under a
// second.
func TestServers(t *testing.T) {
	for _, s := range servers {
		t.Run(s.name, func(t *testing.T) {
			srv, err := s.start()
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Close()
			for _, size := range []int{64, 200_000} {
				pool, err := Dial(srv.Addr(), 4, size)
				if err != nil {
					t.Fatal(err)
				}
				r, err := pool.PingPong(40)
				pool.Close()
				check(t, r, err)
			}
			r, err := Churn(srv.Addr(), 4, 64, 40)
			check(t, r, err)
		})
	}
}
