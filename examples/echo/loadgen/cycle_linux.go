//go:build linux

package loadgen

import (
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Cycler runs connection cycles against one server: dial, write one
// message, read its echo back (checked byte for byte), close. The client
// closes first, so the server reads end-of-file.
//
// It works in blocking system calls: on loopback the handshake completes
// inside connect(2), and a worker blocked in read(2) holds its own thread
// (give the process a P per worker), so the client spends its core on the
// sockets rather than on the runtime's netpoller. Every call is bounded by
// the timeout (SO_SNDTIMEO, SO_RCVTIMEO; connect obeys the first).
//
// A Cycler of NewTLSCycler runs a TLS client over the same blocking
// socket: connect, handshake, the message, close_notify, close.
type Cycler struct {
	sa      unix.SockaddrInet4
	tv      unix.Timeval
	timeout time.Duration
	tls     *tls.Config // nil: plaintext
}

// NewCycler returns a Cycler for addr, an IPv4 host:port; timeout 0 means
// 10 s.
func NewCycler(addr string, timeout time.Duration) (*Cycler, error) {
	return NewTLSCycler(addr, timeout, nil)
}

// NewTLSCycler returns a Cycler whose cycles are TLS client connections
// of config (nil: plaintext, as NewCycler); its ServerName defaults to
// addr's host. Every cycle is a full handshake unless config has a
// ClientSessionCache.
func NewTLSCycler(addr string, timeout time.Duration, config *tls.Config) (*Cycler, error) {
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	ap, err := netip.ParseAddrPort(addr)
	if err != nil || !ap.Addr().Is4() {
		return nil, fmt.Errorf("loadgen: server address %q: want IPv4 host:port (%v)", addr, err)
	}
	config, err = clientConfig(config, addr)
	if err != nil {
		return nil, err
	}
	return &Cycler{
		sa:      unix.SockaddrInet4{Addr: ap.Addr().As4(), Port: int(ap.Port())},
		tv:      unix.NsecToTimeval(timeout.Nanoseconds()),
		timeout: timeout,
		tls:     config,
	}, nil
}

// Run runs n cycles of size-byte messages over workers goroutines, each one
// cycle at a time, taking cycles from a shared budget so that the run ends
// with no straggler. It returns the wall time and every cycle's latency,
// and fails on the first error or on any reply that differs from its
// request.
func (d *Cycler) Run(workers, n, size int) (time.Duration, []time.Duration, error) {
	var (
		budget     atomic.Int64
		mismatches atomic.Int64
		wg         sync.WaitGroup
		errOnce    sync.Once
		firstErr   error
		lat        = make([][]time.Duration, workers)
	)
	budget.Store(int64(n))
	start := time.Now()
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			msg, reply := make([]byte, size), make([]byte, size)
			ls := make([]time.Duration, 0, n/workers+1)
			for i := uint32(1); budget.Add(-1) >= 0; i++ {
				Fill(msg, uint64(TagMagic)<<32|uint64(w+1), i)
				t0 := time.Now()
				if err := d.Cycle(msg, reply); err != nil {
					errOnce.Do(func() { firstErr = err })
					return
				}
				ls = append(ls, time.Since(t0))
				if !bytes.Equal(msg, reply) {
					mismatches.Add(1)
				}
			}
			lat[w] = ls
		}()
	}
	wg.Wait()
	wall := time.Since(start)
	if firstErr != nil {
		return wall, nil, firstErr
	}
	if m := mismatches.Load(); m > 0 {
		return wall, nil, fmt.Errorf("loadgen: %d of %d replies differ from their requests", m, n)
	}
	return wall, slices.Concat(lat...), nil
}

// Cycle is one connection: dial, write msg, read len(msg) bytes into
// reply, close.
func (d *Cycler) Cycle(msg, reply []byte) error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("socket: %w", err)
	}
	defer unix.Close(fd)
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_SNDTIMEO, &d.tv); err != nil {
		return err
	}
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &d.tv); err != nil {
		return err
	}
	// A copy per call: Connect encodes the address into the
	// SockaddrInet4 itself, so concurrent cycles must not share one.
	sa := d.sa
	if err := retry(func() error { return unix.Connect(fd, &sa) }); err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	if d.tls != nil {
		// A handshake is several small writes in a row: without
		// TCP_NODELAY the delayed ACK stalls each cycle about 40 ms.
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1); err != nil {
			return err
		}
		return d.tlsCycle(fd, msg, reply)
	}
	for done := 0; done < len(msg); {
		var n int
		err := retry(func() (err error) { n, err = unix.Write(fd, msg[done:]); return err })
		if err != nil {
			return fmt.Errorf("write: %w", err)
		}
		done += n
	}
	for done := 0; done < len(reply); {
		var n int
		err := retry(func() (err error) { n, err = unix.Read(fd, reply[done:]); return err })
		switch {
		case err == unix.EAGAIN:
			return fmt.Errorf("read: no reply within %v", d.timeout)
		case err != nil:
			return fmt.Errorf("read: %w", err)
		case n == 0:
			return fmt.Errorf("read: end-of-file after %d of %d bytes", done, len(reply))
		}
		done += n
	}
	return nil
}

// tlsCycle is the rest of a TLS cycle on the connected socket fd: the
// handshake, msg out and its echo in, then close_notify. The caller closes
// fd.
func (d *Cycler) tlsCycle(fd int, msg, reply []byte) error {
	tc := tls.Client(&fdConn{fd: fd, timeout: d.timeout}, d.tls)
	if err := tc.Handshake(); err != nil {
		return fmt.Errorf("TLS handshake: %w", err)
	}
	if _, err := tc.Write(msg); err != nil {
		return fmt.Errorf("write: %w", err)
	}
	if n, err := io.ReadFull(tc, reply); err != nil {
		return fmt.Errorf("read: %d of %d bytes: %w", n, len(reply), err)
	}
	// The client closes first, as in plaintext: close_notify, then the
	// caller's close(2) sends the FIN.
	return tc.Close()
}

// fdConn is a blocking socket as a net.Conn, for crypto/tls: its reads
// and writes are blocking system calls, each bounded by the socket's
// SO_RCVTIMEO and SO_SNDTIMEO, so the deadlines crypto/tls asks for are not
// needed and are ignored. Close leaves the descriptor to its owner.
type fdConn struct {
	fd      int
	timeout time.Duration
}

func (c *fdConn) Read(p []byte) (int, error) {
	var n int
	err := retry(func() (err error) { n, err = unix.Read(c.fd, p); return err })
	switch {
	case err == unix.EAGAIN:
		return 0, fmt.Errorf("no data within %v", c.timeout)
	case err != nil:
		return 0, err
	case n == 0 && len(p) > 0:
		return 0, io.EOF
	}
	return n, nil
}

func (c *fdConn) Write(p []byte) (int, error) {
	for done := 0; done < len(p); {
		var n int
		err := retry(func() (err error) { n, err = unix.Write(c.fd, p[done:]); return err })
		if err != nil {
			return done, err
		}
		done += n
	}
	return len(p), nil
}

// The rest of net.Conn: nothing to do, or nothing crypto/tls needs.
func (c *fdConn) Close() error                     { return nil }
func (c *fdConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c *fdConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (c *fdConn) SetDeadline(time.Time) error      { return nil }
func (c *fdConn) SetReadDeadline(time.Time) error  { return nil }
func (c *fdConn) SetWriteDeadline(time.Time) error { return nil }

// retry calls f again while it fails with EINTR.
func retry(f func() error) error {
	for {
		if err := f(); err != unix.EINTR {
			return err
		}
	}
}
