//go:build linux

package conn_test

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gracepoll/gracepoll/conn"
)

// TestPauseRead: while paused OnData is not called though the client
// sends; after ResumeRead everything arrives, in order.
func TestPauseRead(t *testing.T) {
	forEachNetwork(t, func(t *testing.T, network string) {
		r := newRecorder(t)
		var k collector
		r.data = k.take
		_, addr := newServer(t, r, conn.Options{}, network)
		nc := dial(t, addr)
		c := wait(t, r.opened, "OnOpen")
		nc.Write([]byte("first"))
		eventually(t, "first bytes", func() bool { return k.len() == 5 })

		if err := c.PauseRead(); err != nil {
			t.Fatalf("PauseRead: %v", err)
		}
		if err := c.PauseRead(); err != nil {
			t.Errorf("PauseRead twice: %v", err)
		}
		msg := pattern(4 << 20)
		werr := make(chan error, 1)
		go func() { _, err := nc.Write(msg); werr <- err }()
		time.Sleep(quiet)
		if n, in := k.len(), c.Stats().BytesIn; n != 5 || in != 5 {
			t.Fatalf("paused: OnData consumed %d bytes, %d read; want 5 (before the pause)", n, in)
		}
		// Writing is not affected by a pause.
		if _, err := c.Write([]byte("pong")); err != nil {
			t.Errorf("Write while paused: %v", err)
		}
		if got := readFull(t, nc, 4); string(got) != "pong" {
			t.Errorf("client got %q", got)
		}

		if err := c.ResumeRead(); err != nil {
			t.Fatalf("ResumeRead: %v", err)
		}
		if err := wait(t, werr, "client write after ResumeRead"); err != nil {
			t.Fatal(err)
		}
		eventually(t, "all input", func() bool { return k.len() == 5+len(msg) })
		want := append([]byte("first"), msg...)
		if got := k.bytes(); !bytes.Equal(got, want) {
			t.Fatalf("input: %s", firstDiff(got, want))
		}
	})
}

// TestBufferMethods checks Peek, Next, Discard and Buffered at their
// edges.
func TestBufferMethods(t *testing.T) {
	forEachNetwork(t, func(t *testing.T, network string) {
		r := newRecorder(t)
		done := make(chan struct{})
		r.data = func(c *conn.Conn) {
			if c.Buffered() < 11 {
				return // leave it: the rest follows
			}
			defer close(done)
			expect := func(what string, ok bool, format string, a ...any) {
				if !ok {
					t.Errorf("%s: %s", what, fmt.Sprintf(format, a...))
				}
			}
			n, err := c.Discard(0)
			expect("Discard(0)", n == 0 && err == nil && c.Buffered() == 11, "= %d, %v; Buffered %d, want 0, nil, 11", n, err, c.Buffered())
			b, err := c.Peek(100)
			expect("Peek(100)", string(b) == "hello world" && errors.Is(err, conn.ErrShortBuffer), "= %q, %v; want all and ErrShortBuffer", b, err)
			b, err = c.Next(100)
			expect("Next(100)", b == nil && errors.Is(err, conn.ErrShortBuffer) && c.Buffered() == 11, "= %q, %v, Buffered %d; want nil, ErrShortBuffer, nothing consumed", b, err, c.Buffered())
			for name, f := range map[string]func() error{
				"Peek(-1)":    func() error { _, err := c.Peek(-1); return err },
				"Next(-1)":    func() error { _, err := c.Next(-1); return err },
				"Discard(-1)": func() error { _, err := c.Discard(-1); return err },
			} {
				err := f()
				expect(name, errors.Is(err, conn.ErrInvalid) && c.Buffered() == 11, "= %v, Buffered %d; want ErrInvalid, nothing consumed", err, c.Buffered())
			}
			b, err = c.Peek(0)
			expect("Peek(0)", len(b) == 0 && err == nil, "= %q, %v", b, err)
			b, err = c.Peek(5)
			expect("Peek(5)", string(b) == "hello" && err == nil && c.Buffered() == 11, "= %q, %v, Buffered %d", b, err, c.Buffered())
			expect("Peek(5) capacity", cap(b) == 5, "cap %d: appending would overwrite the buffer", cap(b))
			b, err = c.Next(6)
			expect("Next(6)", string(b) == "hello " && err == nil && c.Buffered() == 5, "= %q, %v, Buffered %d", b, err, c.Buffered())
			n, err = c.Discard(100)
			expect("Discard(100)", n == 5 && errors.Is(err, conn.ErrShortBuffer) && c.Buffered() == 0, "= %d, %v, Buffered %d; want 5, ErrShortBuffer, 0", n, err, c.Buffered())
			b, err = c.Peek(0)
			expect("Peek(0) on empty", len(b) == 0 && err == nil, "= %q, %v", b, err)
			b, err = c.Next(1)
			expect("Next(1) on empty", b == nil && errors.Is(err, conn.ErrShortBuffer), "= %q, %v", b, err)
		}
		_, addr := newServer(t, r, conn.Options{}, network)
		nc := dial(t, addr)
		nc.Write([]byte("hello"))
		time.Sleep(20 * time.Millisecond)
		nc.Write([]byte(" world"))
		wait(t, done, "OnData with 11 bytes")
	})
}

// TestSplitCommands sends lines byte by byte: a line-protocol handler that
// consumes whole lines sees each reassembled; at each OnData the buffer
// starts exactly at the first unconsumed byte (the remainder was kept, and
// what was consumed is gone), and holds every byte sent so far.
func TestSplitCommands(t *testing.T) {
	forEachNetwork(t, func(t *testing.T, network string) {
		var stream []byte
		for i := range 20 {
			stream = fmt.Appendf(stream, "SET key%d %s\r\n", i, bytes.Repeat([]byte{'a' + byte(i)}, i))
		}
		r := newRecorder(t)
		var mu sync.Mutex
		var lines []string
		consumed := 0
		r.data = func(c *conn.Conn) {
			b, _ := c.Peek(c.Buffered())
			if want := stream[consumed:min(len(stream), consumed+len(b))]; !bytes.Equal(b, want) {
				t.Errorf("OnData after %d bytes consumed: buffer %q, want %q", consumed, b, want)
			}
			for {
				b, _ := c.Peek(c.Buffered())
				i := bytes.IndexByte(b, '\n')
				if i < 0 {
					return
				}
				line, err := c.Next(i + 1)
				if err != nil {
					t.Errorf("Next(%d): %v", i+1, err)
					return
				}
				consumed += i + 1
				mu.Lock()
				lines = append(lines, string(line))
				mu.Unlock()
			}
		}
		_, addr := newServer(t, r, conn.Options{}, network)
		nc := dial(t, addr)
		for i := range stream {
			if _, err := nc.Write(stream[i : i+1]); err != nil {
				t.Fatal(err)
			}
			if i%7 == 0 {
				time.Sleep(200 * time.Microsecond)
			}
		}
		eventually(t, "all lines", func() bool { mu.Lock(); defer mu.Unlock(); return len(lines) == 20 })
		mu.Lock()
		defer mu.Unlock()
		if got := []byte(strings.Join(lines, "")); !bytes.Equal(got, stream) {
			t.Errorf("lines: %s", firstDiff(got, stream))
		}
	})
}

// TestMaxBuffered: a handler that never consumes gets its connection
// closed with ReasonError and ErrInboundFull.
func TestMaxBuffered(t *testing.T) {
	forEachNetwork(t, func(t *testing.T, network string) {
		r := newRecorder(t)
		r.data = func(*conn.Conn) {} // consumes nothing
		s, addr := newServer(t, r, conn.Options{MaxBuffered: 64 << 10}, network)
		nc := dial(t, addr)
		go nc.Write(make([]byte, 256<<10)) // fails once the server closes
		cl := wait(t, r.closed, "OnClose")
		if cl.reason != conn.ReasonError || !errors.Is(cl.err, conn.ErrInboundFull) {
			t.Errorf("OnClose(%v, %v), want error, ErrInboundFull", cl.reason, cl.err)
		}
		if cl.stats.BytesIn <= 64<<10 {
			t.Errorf("closed after %d bytes in, want more than MaxBuffered", cl.stats.BytesIn)
		}
		if got := s.Stats().Closed["error"]; got != 1 {
			t.Errorf("ServerStats.Closed[error] = %d, want 1", got)
		}
		readToEOF(nc)
	})
}
