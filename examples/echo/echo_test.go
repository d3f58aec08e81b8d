//go:build linux

package main

import (
	"bytes"
	"flag"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/gracepoll/gracepoll/poller"
)

// short is a configuration small enough for a test: few connections, a
// short run, and churn on a fast tick so that connections are deleted while
// traffic flows.
func short(mod func(*config)) config {
	cfg := defaultConfig()
	cfg.Conns = 16
	cfg.Duration = 400 * time.Millisecond
	cfg.tick = 50 * time.Millisecond
	cfg.Churn = 0.5 // per second: a few reopens per tick
	cfg.Quiet = true
	if mod != nil {
		mod(&cfg)
	}
	return cfg
}

// TestEcho runs each server (package conn's Handler, the same over TLS, and
// the raw-poller echoserver) and the load generator in-process and requires
// every reply to match its request, with churn, in each configuration the
// example offers. The 200 KB variant on the shared topology with two
// waiters is the one that corrupted streams in an unserialised prototype:
// each message needs several reads and partial writes, and two waiters
// handling one socket at once would interleave them. A small send buffer
// makes nearly every reply a partial write, so the server switches to
// Writable and back, re-arming the registration while it runs (for the
// conn server: its output queue fills, drains, and crosses the high-water
// mark; over TLS, records span reads and writes too). Over TLS every
// reopen is a handshake, and half of the churned connections vanish with
// a reset and no close_notify.
func TestEcho(t *testing.T) {
	cases := []struct {
		name string
		mod  func(*config)
	}{
		{"default", nil},
		{"200KB/shared/2-waiters", func(c *config) {
			c.Conns, c.Size, c.Waiters, c.Topology, c.Churn = 6, 200_000, 2, "shared", 1
			c.sndBuf = 4096
		}},
		{"200KB/per-waiter", func(c *config) {
			c.Conns, c.Size, c.Churn = 6, 200_000, 1
			c.sndBuf = 4096
		}},
		{"per-waiter/epoch", func(c *config) { c.Topology, c.Reclaimer, c.Size = "per-waiter", "epoch", 1000 }},
		{"stealing/2-waiters", func(c *config) { c.Waiters, c.Topology, c.Churn = 2, "stealing", 1 }},
		{"classic", func(c *config) { c.Reclaimer, c.Timeout = "classic", 2*time.Millisecond }},
	}
	for _, server := range []string{"conn", "raw", "conn-tls"} {
		for _, tc := range cases {
			t.Run(server+"/"+tc.name, func(t *testing.T) {
				var out bytes.Buffer
				res, err := run(short(func(c *config) {
					c.Server, c.TLS = strings.CutSuffix(server, "-tls")
					if tc.mod != nil {
						tc.mod(c)
					}
				}), &out)
				if err != nil {
					t.Fatal(err)
				}
				if !res.correct() {
					t.Errorf("run failed its correctness check:\n%s", out.String())
				}
				if res.Reopened == 0 {
					t.Errorf("no connection was reopened: churn did not run\n%s", out.String())
				}
				if res.Latency.Samples+res.StopLatency.Samples == 0 {
					t.Errorf("no release latency recorded\n%s", out.String())
				}
				if !strings.Contains(out.String(), "correctness: OK") {
					t.Errorf("summary lacks the correctness line:\n%s", out.String())
				}
				if (res.Conn != nil) != (server != "raw") {
					t.Errorf("server %s: conn stats %v", server, res.Conn)
				}
				if res.Conn == nil {
					return
				}
				// A TLS connection churned at once may be reset
				// before the server has read the client's Finished:
				// a failed handshake, which the handler never saw.
				st := res.Conn.TLS
				var failed uint64
				for _, n := range st.Failed {
					failed += n
				}
				if res.Conn.Open != 0 || uint64(res.Conn.Accepted) != res.Accepted+failed+st.TimedOut || res.Conn.LostOutput != 0 {
					t.Errorf("conn server counters: %+v (handler saw %d opened)", *res.Conn, res.Accepted)
				}
				if !strings.Contains(out.String(), "conn server:") {
					t.Errorf("summary lacks the conn server line:\n%s", out.String())
				}
				if tls := strings.Contains(out.String(), "  tls:              handshakes "); tls != (server == "conn-tls") {
					t.Errorf("summary has a TLS line: %v\n%s", tls, out.String())
				}
				if server == "conn-tls" && (st.Handshakes == 0 || st.Handshakes != res.Accepted || st.InProgress != 0 || st.P50 <= 0) {
					t.Errorf("TLS counters %+v: the handler opened %d connections\n%s", st, res.Accepted, out.String())
				}
			})
		}
	}
}

// TestProgress checks the per-second output: a progress line and the
// statistics table.
func TestProgress(t *testing.T) {
	for _, server := range []string{"conn", "raw", "conn-tls"} {
		var out bytes.Buffer
		res, err := run(short(func(c *config) {
			c.Server, c.TLS = strings.CutSuffix(server, "-tls")
			c.Quiet, c.Conns, c.Duration = false, 4, 120*time.Millisecond
		}), &out)
		if err != nil {
			t.Fatal(err)
		}
		if !res.correct() {
			t.Errorf("%s: run failed:\n%s", server, out.String())
		}
		want := []string{"msgs/s", "reopened", "waiter", "stale", "summary: " + strings.TrimSuffix(server, "-tls"), "release latency"}
		switch server {
		case "conn":
			want = append(want, "package conn", "    conn: open", "accept pauses")
		case "conn-tls":
			want = append(want, "package conn", "over TLS", "    tls:  handshakes", "  tls:              handshakes")
		default:
			want = append(want, "raw poller")
		}
		if server != "conn-tls" && strings.Contains(out.String(), "tls:") {
			t.Errorf("%s: a TLS line without -tls:\n%s", server, out.String())
		}
		for _, w := range want {
			if !strings.Contains(out.String(), w) {
				t.Errorf("%s: output lacks %q:\n%s", server, w, out.String())
			}
		}
	}
}

// TestCorrectFails checks that the correctness line can fail.
func TestCorrectFails(t *testing.T) {
	good := result{Msgs: 10, Accepted: 3, Released: 3}
	if !good.correct() {
		t.Fatal("a clean result is not correct")
	}
	for _, bad := range []result{
		{Msgs: 10, Accepted: 3, Released: 3, Mismatches: 1},
		{Msgs: 10, Accepted: 3, Released: 3, CrossedBytes: 16},
		{Msgs: 10, Accepted: 3, Released: 3, Errors: 1},
		{Msgs: 10, Accepted: 3, Released: 2},
		{Msgs: 10, Accepted: 3, Released: 3, Unreleased: 1},
		{Accepted: 3, Released: 3},
	} {
		if bad.correct() {
			t.Errorf("%+v counted as correct", bad)
		}
		var out bytes.Buffer
		bad.summary(&out, defaultConfig(), mustOptions(t, defaultConfig()))
		if !strings.Contains(out.String(), "correctness: FAILED") {
			t.Errorf("summary of %+v lacks the failure line:\n%s", bad, out.String())
		}
	}
}

// TestForeignBytes checks the detector of bytes that crossed connections.
func TestForeignBytes(t *testing.T) {
	mine, theirs := make([]byte, 64), make([]byte, 64)
	fill(mine, uint64(tagMagic)<<32|7, 3)
	fill(theirs, uint64(tagMagic)<<32|9, 3)
	if n := foreignBytes(mine, 7); n != 0 {
		t.Errorf("own message: %d foreign bytes", n)
	}
	// Two of their records, out of alignment by 5 bytes.
	mixed := append(append(append([]byte{}, mine[:21]...), theirs[:32]...), mine[:11]...)
	if n := foreignBytes(mixed, 7); n != 32 {
		t.Errorf("mixed message: %d foreign bytes, want 32", n)
	}
}

// TestFlags checks the command line: defaults, every flag, bad values and
// the help text.
func TestFlags(t *testing.T) {
	cfg, err := parseFlags(nil, io.Discard)
	if err != nil || cfg.Server != "conn" || cfg.Conns != 500 || cfg.Size != 64 || cfg.Churn != 0.1 || cfg.Duration != 10*time.Second {
		t.Errorf("defaults: %+v, %v", cfg, err)
	}
	cfg, err = parseFlags(strings.Fields("-server raw -conns 7 -size 9 -churn 0.5 -duration 2s -waiters 3 -topology per-waiter -reclaimer classic -timeout 5ms -quiet"), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	opts := mustOptions(t, cfg)
	if cfg.Server != "raw" || cfg.Conns != 7 || cfg.Size != 9 || cfg.Churn != 0.5 || cfg.Duration != 2*time.Second || !cfg.Quiet ||
		opts.Waiters != 3 || opts.Topology.String() != "per-waiter" || opts.Reclaimer == nil ||
		opts.WaitTimeout != 5*time.Millisecond {
		t.Errorf("flags not applied: %+v %+v", cfg, opts)
	}
	if cfg, err := parseFlags([]string{"-tls"}, io.Discard); err != nil || !cfg.TLS {
		t.Errorf("-tls: %+v, %v", cfg, err)
	}
	cfg, _ = parseFlags([]string{"-reclaimer", "classic"}, io.Discard)
	if opts := mustOptions(t, cfg); opts.WaitTimeout != classicTimeout {
		t.Errorf("classic without -timeout: WaitTimeout %v, want %v", opts.WaitTimeout, classicTimeout)
	}
	for _, bad := range []string{"-conns 0", "-churn 2", "-topology ring", "-reclaimer rcu", "-size -1", "-duration 0s", "-server gnet", "stray", "-tls -server raw"} {
		if _, err := parseFlags(strings.Fields(bad), io.Discard); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	var help bytes.Buffer
	if _, err := parseFlags([]string{"-h"}, &help); err != flag.ErrHelp {
		t.Errorf("-h: %v", err)
	}
	for _, want := range []string{"echo server on gracepoll", "-server", "-conns", "-churn", "-reclaimer", "-topology", "-quiet", "-tls"} {
		if !strings.Contains(help.String(), want) {
			t.Errorf("help lacks %q:\n%s", want, help.String())
		}
	}
}

func mustOptions(t *testing.T, cfg config) poller.Options {
	t.Helper()
	o, err := cfg.options()
	if err != nil {
		t.Fatal(err)
	}
	return o
}
