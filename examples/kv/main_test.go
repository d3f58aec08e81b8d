//go:build linux

package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gracepoll/gracepoll/examples/kv/resp"
	"github.com/gracepoll/gracepoll/internal/testkit"
)

// TestRun serves on TCP and on a Unix socket until the context (the
// signal, in main) is done, with a client still connected, and checks the
// clean shutdown and its final report.
func TestRun(t *testing.T) {
	for _, addr := range []string{"127.0.0.1:0", filepath.Join(t.TempDir(), "kv.sock")} {
		ctx, cancel := context.WithCancel(context.Background())
		ready := make(chan net.Addr, 1)
		var out testkit.SyncBuffer
		done := make(chan error, 1)
		go func() { done <- run(ctx, []string{"-addr", addr, "-stats", "20ms"}, &out, io.Discard, ready) }()
		var bound net.Addr
		select {
		case bound = <-ready:
		case err := <-done:
			t.Fatal(err)
		}
		nc, err := net.Dial(bound.Network(), bound.String())
		if err != nil {
			t.Fatal(err)
		}
		nc.Write(resp.AppendCommand(nil, "SET", "k", "v"))
		if v, err := resp.ReadValue(bufio.NewReader(nc)); err != nil || v.Str != "OK" {
			t.Fatalf("SET: %v %v", v, err)
		}
		time.Sleep(50 * time.Millisecond) // a periodic report or two
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if n, err := nc.Read(make([]byte, 1)); err == nil {
			t.Errorf("the connection survived the shutdown: read %d bytes", n)
		}
		nc.Close()
		for _, want := range []string{"serving RESP2 on", "shut down: 1 connection finished, 0 connections reset", "kv: 1 key;", "1 accepted; closed: shutdown 1;", "waiter-0"} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("%s: output lacks %q:\n%s", addr, want, out.String())
			}
		}
	}
}

func TestFlags(t *testing.T) {
	for _, bad := range [][]string{{"-shards", "0"}, {"-waiters", "-1"}, {"stray"}, {"-addr", "256.0.0.1:1"}, {"-nosuch"}, {"-topology", "ring"}} {
		if err := run(context.Background(), bad, io.Discard, io.Discard, nil); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	var help bytes.Buffer
	run(context.Background(), []string{"-h"}, io.Discard, &help, nil)
	for _, want := range []string{"Redis protocol", "-addr", "-max-value", "-stats"} {
		if !strings.Contains(help.String(), want) {
			t.Errorf("help lacks %q", want)
		}
	}
}

// TestTopology: -topology shared and -topology stealing serve, and say
// so; an unknown one is refused.
func TestTopology(t *testing.T) {
	for _, topo := range []string{"shared", "stealing"} {
		t.Run(topo, func(t *testing.T) { testTopology(t, topo) })
	}
	err := run(context.Background(), []string{"-addr", "127.0.0.1:0", "-topology", "spread"}, io.Discard, io.Discard, nil)
	if err == nil || !strings.Contains(err.Error(), "want per-waiter, shared or stealing") {
		t.Errorf("-topology spread: %v, want an error naming the topologies", err)
	}
}

func testTopology(t *testing.T, topo string) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready := make(chan net.Addr, 1)
	var out testkit.SyncBuffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"-addr", "127.0.0.1:0", "-topology", topo, "-waiters", "4"}, &out, io.Discard, ready)
	}()
	var bound net.Addr
	select {
	case bound = <-ready:
	case err := <-done:
		t.Fatal(err)
	}
	for range 8 { // connections land on any of the waiters
		nc, err := net.Dial("tcp", bound.String())
		if err != nil {
			t.Fatal(err)
		}
		nc.Write(resp.AppendCommand(nil, "PING"))
		if v, err := resp.ReadValue(bufio.NewReader(nc)); err != nil || v.Str != "PONG" {
			t.Fatalf("PING: %v %v", v, err)
		}
		nc.Close()
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "with 4 waiters ("+topo+")") {
		t.Errorf("output does not name the topology:\n%s", out.String())
	}
}

// TestCounts: counters by cause read as words, in the same order in
// every report however the map iterates.
func TestCounts(t *testing.T) {
	m := map[string]uint64{"reset": 3, "eof": 12, "peer-closed": 1, "abort": 2}
	for range 20 {
		if got := counts(m); got != "abort 2, eof 12, peer-closed 1, reset 3" {
			t.Fatalf("counts: %q", got)
		}
	}
	if got := counts(nil); got != "none" {
		t.Errorf("counts(nil): %q", got)
	}
	for n, want := range map[uint64]string{0: "0 keys", 1: "1 key", 2: "2 keys"} {
		if got := plural(n, "key"); got != want {
			t.Errorf("plural(%d): %q, want %q", n, got, want)
		}
	}
}
