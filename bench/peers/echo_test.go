//go:build linux

package peers

import "testing"

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
	for _, s := range Servers {
		b.Run(s.Name, func(b *testing.B) {
			srv, err := s.Start()
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
	for _, s := range Servers {
		t.Run(s.Name, func(t *testing.T) {
			srv, err := s.Start()
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
