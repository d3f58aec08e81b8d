//go:build linux

package conn_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gracepoll/gracepoll/conn"
)

// TestPartialWrites echoes 200 KB and 1 MB messages through a 4 KB send
// buffer to a client that does not read at first: the server's writes are
// partial and queue; every byte arrives in order, and the queue empties.
func TestPartialWrites(t *testing.T) {
	forEachNetwork(t, func(t *testing.T, network string) {
		for _, size := range []int{200 << 10, 1 << 20} {
			t.Run(fmt.Sprint(size), func(t *testing.T) {
				r := newRecorder(t)
				_, addr := newServer(t, r, conn.Options{SendBuffer: 4096}, network)
				nc := dial(t, addr)
				c := wait(t, r.opened, "OnOpen")

				msg := pattern(size)
				var maxQueued atomic.Int64
				stop := make(chan struct{})
				polled := make(chan struct{})
				go func() {
					defer close(polled)
					for {
						if q := int64(c.Queued()); q > maxQueued.Load() {
							maxQueued.Store(q)
						}
						select {
						case <-stop:
							return
						case <-time.After(200 * time.Microsecond):
						}
					}
				}()
				werr := make(chan error, 1)
				go func() { _, err := nc.Write(msg); werr <- err }()

				// Read nothing for a while, then slowly, then at speed.
				time.Sleep(300 * time.Millisecond)
				got := make([]byte, 0, size)
				for range 8 {
					got = append(got, readFull(t, nc, 1024)...)
					time.Sleep(5 * time.Millisecond)
				}
				got = append(got, readFull(t, nc, size-len(got))...)
				close(stop)
				<-polled
				if err := wait(t, werr, "client write"); err != nil {
					t.Fatalf("client write: %v", err)
				}
				if !bytes.Equal(got, msg) {
					t.Fatalf("echo differs: %s", firstDiff(got, msg))
				}
				if maxQueued.Load() == 0 {
					t.Errorf("Queued() never above 0: the writes were not partial")
				}
				eventually(t, "Queued() back to 0", func() bool { return c.Queued() == 0 })
				if st := c.Stats(); st.BytesIn != uint64(size) || st.BytesOut != uint64(size) || st.Queued != 0 {
					t.Errorf("Stats %+v: want %d bytes in and out, nothing queued", st, size)
				}
				t.Logf("largest queue seen: %d bytes", maxQueued.Load())
			})
		}
	})
}

// TestWritev writes vectors from the handler (the socket taking all, or
// part of it, and behind a queue) and from another goroutine.
func TestWritev(t *testing.T) {
	forEachNetwork(t, func(t *testing.T, network string) {
		big := pattern(300 << 10)
		vec := func(tag string) [][]byte {
			return [][]byte{[]byte(tag + ":"), nil, big[:100<<10], {}, big[100<<10:], []byte("\n")}
		}
		want := func(tag string) []byte { return bytes.Join(vec(tag), nil) }

		r := newRecorder(t)
		other := make(chan *conn.Conn, 1)
		r.data = func(c *conn.Conn) {
			b, _ := c.Next(c.Buffered())
			for _, cmd := range b {
				switch cmd {
				case 's': // small, taken by the socket at once
					if n, err := c.Writev([][]byte{[]byte("ab"), []byte("c"), nil, []byte("d\n")}); n != 5 || err != nil {
						t.Errorf("Writev(small) = %d, %v", n, err)
					}
				case 'v': // large: partial, then queued
					if n, err := c.Writev(vec("h1")); n != len(want("h1")) || err != nil {
						t.Errorf("Writev(large) = %d, %v", n, err)
					}
					if n, err := c.Writev(vec("h2")); n != len(want("h2")) || err != nil {
						t.Errorf("Writev behind a queue = %d, %v", n, err)
					}
					if n, err := c.Writev(nil); n != 0 || err != nil {
						t.Errorf("Writev(nil) = %d, %v", n, err)
					}
				case 'g':
					other <- c
				}
			}
		}
		_, addr := newServer(t, r, conn.Options{SendBuffer: 4096}, network)
		nc := dial(t, addr)

		nc.Write([]byte("s"))
		if got := readFull(t, nc, 5); string(got) != "abcd\n" {
			t.Fatalf("small Writev: got %q", got)
		}
		nc.Write([]byte("v"))
		exp := append(want("h1"), want("h2")...)
		if got := readFull(t, nc, len(exp)); !bytes.Equal(got, exp) {
			t.Fatalf("large Writevs: %s", firstDiff(got, exp))
		}

		nc.Write([]byte("g"))
		c := wait(t, other, "connection handed over")
		done := make(chan struct{})
		go func() {
			defer close(done)
			for i := range 3 {
				tag := fmt.Sprintf("g%d", i)
				if n, err := c.Writev(vec(tag)); n != len(want(tag)) || err != nil {
					t.Errorf("Writev from a goroutine = %d, %v", n, err)
				}
			}
		}()
		<-done
		exp = nil
		for i := range 3 {
			exp = append(exp, want(fmt.Sprintf("g%d", i))...)
		}
		if got := readFull(t, nc, len(exp)); !bytes.Equal(got, exp) {
			t.Fatalf("Writevs from a goroutine: %s", firstDiff(got, exp))
		}
		eventually(t, "Queued() back to 0", func() bool { return c.Queued() == 0 })
	})
}

// Records of the concurrent-writes test: a header (writer, sequence number,
// payload length) and a payload of one repeated byte, so a record that is
// cut or interleaved with another is detected.
const recHeader = 10

func record(g, seq int) []byte {
	n := 1 + (g*7919+seq*104729)%3000
	b := make([]byte, recHeader+n)
	binary.BigEndian.PutUint16(b[0:], uint16(g))
	binary.BigEndian.PutUint32(b[2:], uint32(seq))
	binary.BigEndian.PutUint32(b[6:], uint32(n))
	fill := byte(g*31 + seq)
	for i := recHeader; i < len(b); i++ {
		b[i] = fill
	}
	return b
}

// parseRecords checks a stream of records: each well formed, each writer's
// in sequence from 0. It returns how many each writer had, and the length
// of a cut record at the end, if any.
func parseRecords(data []byte, writers int) (counts []int, trailing int, err error) {
	counts = make([]int, writers)
	for len(data) > 0 {
		if len(data) < recHeader {
			return counts, len(data), nil
		}
		g := int(binary.BigEndian.Uint16(data[0:]))
		seq := int(binary.BigEndian.Uint32(data[2:]))
		n := int(binary.BigEndian.Uint32(data[6:]))
		if g >= writers {
			return counts, 0, fmt.Errorf("record header names writer %d of %d: interleaved", g, writers)
		}
		want := record(g, seq)
		if n != len(want)-recHeader {
			return counts, 0, fmt.Errorf("writer %d record %d: length %d, want %d", g, seq, n, len(want)-recHeader)
		}
		if seq != counts[g] {
			return counts, 0, fmt.Errorf("writer %d: record %d after %d records: out of order", g, seq, counts[g])
		}
		if len(data) < len(want) {
			if !bytes.Equal(data, want[:len(data)]) {
				return counts, 0, fmt.Errorf("writer %d record %d: cut and corrupt", g, seq)
			}
			return counts, len(data), nil
		}
		if !bytes.Equal(data[:len(want)], want) {
			return counts, 0, fmt.Errorf("writer %d record %d: payload differs (interleaved)", g, seq)
		}
		counts[g]++
		data = data[len(want):]
	}
	return counts, 0, nil
}

// TestConcurrentWrites has many goroutines write numbered records to one
// connection at once, while Close or Abort races them. Every Write either
// succeeded or failed with net.ErrClosed; after Close every successful
// record arrives whole, each writer's in order, then EOF. With Abort the
// peer sees a prefix of each writer's records (queued output is dropped,
// perhaps cutting the last).
func TestConcurrentWrites(t *testing.T) {
	const writers = 8
	for _, mode := range []string{"none", "close", "abort"} {
		t.Run(mode, func(t *testing.T) {
			forEachNetwork(t, func(t *testing.T, network string) {
				r := newRecorder(t)
				_, addr := newServer(t, r, conn.Options{MaxQueued: 64 << 20}, network)
				rounds := 6
				if mode == "none" {
					rounds = 2
				}
				for round := range rounds {
					concurrentRound(t, r, addr, mode, writers, round)
				}
			})
		})
	}
}

func concurrentRound(t *testing.T, r *recorder, addr net.Addr, mode string, writers, round int) {
	nc := dial(t, addr)
	c := wait(t, r.opened, "OnOpen")
	perWriter := 400
	if mode != "none" {
		perWriter = 1 << 30 // until the close stops them
	}

	var wg sync.WaitGroup
	okCount := make([]int, writers)
	start := make(chan struct{})
	for g := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for seq := range perWriter {
				rec := record(g, seq)
				n, err := c.Write(rec)
				if err != nil {
					if !isClosed(err) {
						t.Errorf("writer %d record %d: %v, want an error matching net.ErrClosed", g, seq, err)
					}
					if n != 0 {
						t.Errorf("writer %d: failed Write returned n=%d", g, n)
					}
					return
				}
				if n != len(rec) {
					t.Errorf("writer %d record %d: Write = %d, want %d", g, seq, n, len(rec))
					return
				}
				okCount[g]++
			}
		}()
	}

	type result struct {
		data []byte
		err  error
	}
	read := make(chan result, 1)
	go func() { b, err := readToEOF(nc); read <- result{b, err} }()

	close(start)
	var closeErr error
	switch mode {
	case "none":
	case "close", "abort":
		time.Sleep(time.Duration(rand.IntN(20)) * time.Millisecond)
		if mode == "close" {
			closeErr = c.Close()
		} else {
			closeErr = c.Abort()
		}
		if closeErr != nil {
			t.Errorf("round %d: %s: %v", round, mode, closeErr)
		}
	}
	wg.Wait()
	if mode == "none" {
		if err := c.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	}
	res := wait(t, read, "client reads to EOF")
	nc.Close()
	cl := wait(t, r.closed, "OnClose")

	counts, trailing, perr := parseRecords(res.data, writers)
	if perr != nil {
		t.Fatalf("round %d (%s): after %d bytes: %v", round, mode, len(res.data), perr)
	}
	total := 0
	for g := range writers {
		total += okCount[g]
		switch {
		case mode == "abort":
			if counts[g] > okCount[g] {
				t.Errorf("writer %d: %d records arrived, only %d written", g, counts[g], okCount[g])
			}
		case counts[g] != okCount[g]:
			t.Errorf("round %d (%s): writer %d: %d records written, %d arrived before EOF", round, mode, g, okCount[g], counts[g])
		}
	}
	if mode != "abort" {
		if res.err != nil {
			t.Errorf("round %d (%s): client read: %v, want EOF", round, mode, res.err)
		}
		if trailing != 0 {
			t.Errorf("round %d (%s): a cut record of %d bytes at the end", round, mode, trailing)
		}
		if cl.reason != conn.ReasonLocalClose {
			t.Errorf("round %d: OnClose reason %v (%v), want local-close", round, cl.reason, cl.err)
		}
	} else if cl.reason != conn.ReasonAbort {
		t.Errorf("round %d: OnClose reason %v (%v), want abort", round, cl.reason, cl.err)
	}
	if total == 0 && mode == "none" {
		t.Errorf("no record written")
	}
	// Writes after the end fail too.
	if _, err := c.Write([]byte("x")); !isClosed(err) {
		t.Errorf("Write after OnClose: %v, want net.ErrClosed", err)
	}
}

// TestSlowReader: a client that does not read against the write bound of a
// writer that ignores Writable. The server writes 64 KB chunks until
// ErrQueueFull: the queue never exceeds
// MaxQueued, the process heap does not grow with the attempts, a refused
// Write queues nothing, and everything written before arrives once the
// client reads. Above HighWater the server stops reading (the client's
// input is not read); OnDrain runs once the client has read the queue
// down, and reading resumes.
func TestSlowReader(t *testing.T) {
	forEachNetwork(t, func(t *testing.T, network string) {
		const maxQueued, high, low, chunk = 1 << 20, 512 << 10, 128 << 10, 64 << 10
		r := newRecorder(t)
		var k collector
		r.data = k.take
		drained := make(chan int, 16)
		r.drain = func(c *conn.Conn) { drained <- c.Queued() }
		opts := conn.Options{MaxQueued: maxQueued, HighWater: high, LowWater: low, SendBuffer: 4096}
		_, addr := newServer(t, withDrain{r}, opts, network)
		nc := dialSmallReceive(t, addr)
		c := wait(t, r.opened, "OnOpen")

		src := pattern(32 << 20)
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		heap0 := ms.HeapAlloc

		off, full, attempts := 0, 0, 0
		for ; attempts < 400 && off+chunk <= len(src); attempts++ {
			before := c.Queued()
			n, err := c.Write(src[off : off+chunk])
			q := c.Queued()
			if q > maxQueued {
				t.Fatalf("Queued %d > MaxQueued %d", q, maxQueued)
			}
			switch {
			case err == nil && n == chunk:
				off += chunk
			case errors.Is(err, conn.ErrQueueFull):
				full++
				if n != 0 || q > before {
					t.Fatalf("refused Write: n=%d, queued %d -> %d; want nothing written or queued", n, before, q)
				}
			default:
				t.Fatalf("Write after %d bytes: %d, %v", off, n, err)
			}
		}
		if full == 0 {
			t.Fatalf("%d bytes written to a client that does not read, never ErrQueueFull", off)
		}
		if q := c.Queued(); q <= high {
			t.Errorf("Queued %d, want above HighWater %d", q, high)
		}
		runtime.GC()
		runtime.ReadMemStats(&ms)
		if grew := int64(ms.HeapAlloc) - int64(heap0); grew > 4*maxQueued {
			t.Errorf("heap grew by %d bytes over %d attempts; want bounded by the queue (%d)", grew, attempts, maxQueued)
		}
		t.Logf("written %d bytes in %d attempts, %d refused; queued %d", off, attempts, full, c.Queued())

		// Above HighWater the server does not read.
		in0 := c.Stats().BytesIn
		nc.Write(pattern(8 << 10))
		time.Sleep(quiet)
		if in := c.Stats().BytesIn; in != in0 {
			t.Errorf("above HighWater: %d bytes read, want none", in-in0)
		}
		select {
		case q := <-drained:
			t.Errorf("OnDrain before the client read (queued %d)", q)
		default:
		}

		got := readFull(t, nc, off)
		if !bytes.Equal(got, src[:off]) {
			t.Fatalf("client read: %s", firstDiff(got, src[:off]))
		}
		if q := wait(t, drained, "OnDrain"); q > low {
			t.Errorf("OnDrain with %d queued, want at most LowWater %d", q, low)
		}
		eventually(t, "reading resumed", func() bool { return k.len() == 8<<10 })
		if !bytes.Equal(k.bytes(), pattern(8<<10)) {
			t.Errorf("input after resuming: %s", firstDiff(k.bytes(), pattern(8<<10)))
		}
		eventually(t, "queue empty", func() bool { return c.Queued() == 0 })
	})
}
