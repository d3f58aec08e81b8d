//go:build linux

package peers

import (
	"bufio"
	"bytes"
	"crypto/sha1"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// The WebSocket benchmarks' client: one for every server, written here on
// raw frames so that its cost is small and the same for all, and so that
// 10,000 connections cost it one epoll loop rather than 10,000 goroutines.
// A connection is opened with Go's net package (dial, opening handshake,
// one echo), then its descriptor is duplicated and the net.Conn closed: the
// benchmarks read and write the socket with system calls from one thread.
// Every frame it receives is checked: final or a fragment in order,
// unmasked, no reserved bit, the expected opcode and payload.

// WebSocket opcodes the client sends and expects (RFC 6455 section 5.2).
const (
	wsbOpCont   = 0x0
	wsbOpBinary = 0x2
	wsbOpClose  = 0x8
)

// wsbConn is one client connection past its handshake.
type wsbConn struct {
	fd  int
	in  []byte // bytes received and not yet parsed
	out []byte // the part of a frame the socket did not take

	// The message being reassembled from fragments (msgOp 0: none).
	msgOp byte
	msg   []byte

	// The echo in flight: its payload unmasked, which the echo must
	// match, the masked frame sent, and when it was sent.
	payload []byte
	frame   []byte
	sentAt  time.Duration
	busy    bool
	got     bool // a broadcast's message arrived
}

// wsbAccept is Sec-WebSocket-Accept for key (RFC 6455 section 4.2.2).
func wsbAccept(key string) string {
	sum := sha1.Sum([]byte(key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
	return base64.StdEncoding.EncodeToString(sum[:])
}

// wsbMask XORs p with key from the key's first byte (RFC 6455 section
// 5.3), eight bytes at a time: the client masks every byte it sends.
func wsbMask(p []byte, key [4]byte) {
	k4 := uint64(binary.LittleEndian.Uint32(key[:]))
	k8 := k4 | k4<<32
	i := 0
	for ; i+8 <= len(p); i += 8 {
		binary.LittleEndian.PutUint64(p[i:], binary.LittleEndian.Uint64(p[i:])^k8)
	}
	for ; i < len(p); i++ {
		p[i] ^= key[i&3]
	}
}

// wsbAppendFrame appends a final, masked client frame of op and payload.
func wsbAppendFrame(dst []byte, op byte, payload []byte, key [4]byte) []byte {
	dst = append(dst, 0x80|op)
	switch n := len(payload); {
	case n <= 125:
		dst = append(dst, 0x80|byte(n))
	case n <= 0xffff:
		dst = append(dst, 0x80|126, byte(n>>8), byte(n))
	default:
		dst = append(dst, 0x80|127)
		dst = binary.BigEndian.AppendUint64(dst, uint64(n))
	}
	dst = append(dst, key[:]...)
	h := len(dst)
	dst = append(dst, payload...)
	wsbMask(dst[h:], key)
	return dst
}

// wsbParseFrame parses the server frame at the start of b, which must be
// unmasked, without reserved bits (no extension was agreed), and of at
// most WSMaxMessage bytes. n is 0 if b does not hold all of it yet.
func wsbParseFrame(b []byte) (fin bool, op byte, payload []byte, n int, err error) {
	if len(b) < 2 {
		return false, 0, nil, 0, nil
	}
	if b[0]&0x70 != 0 || b[1]&0x80 != 0 {
		return false, 0, nil, 0, fmt.Errorf("frame header %#02x %#02x: reserved bits or a mask from the server", b[0], b[1])
	}
	fin, op = b[0]&0x80 != 0, b[0]&0x0f
	h, l := 2, uint64(b[1]&0x7f)
	switch l {
	case 126:
		if len(b) < 4 {
			return false, 0, nil, 0, nil
		}
		h, l = 4, uint64(binary.BigEndian.Uint16(b[2:]))
	case 127:
		if len(b) < 10 {
			return false, 0, nil, 0, nil
		}
		h, l = 10, binary.BigEndian.Uint64(b[2:])
	}
	if l > WSMaxMessage {
		return false, 0, nil, 0, fmt.Errorf("frame of %d bytes, over the limit", l)
	}
	if uint64(len(b)-h) < l {
		return false, 0, nil, 0, nil
	}
	return fin, op, b[h : h+int(l)], h + int(l), nil
}

// next returns the next whole message in c.in, reassembled if the server
// fragmented it, and consumes it; ok is false until one has arrived. Only
// binary messages are expected: a control frame (a close, a ping no
// server here sends) is an error.
func (c *wsbConn) next() (msg []byte, ok bool, err error) {
	for {
		fin, op, p, n, err := wsbParseFrame(c.in)
		if err != nil || n == 0 {
			return nil, false, err
		}
		switch {
		case op == wsbOpClose:
			return nil, false, fmt.Errorf("close frame %q from the server", p)
		case op&0x8 != 0:
			return nil, false, fmt.Errorf("unexpected control frame, opcode %#x", op)
		case op == wsbOpCont && c.msgOp == 0, op != wsbOpCont && c.msgOp != 0:
			return nil, false, fmt.Errorf("fragment out of order (opcode %#x)", op)
		case op != wsbOpCont && op != wsbOpBinary:
			return nil, false, fmt.Errorf("opcode %#x, want binary (%#x)", op, wsbOpBinary)
		}
		if fin && c.msgOp == 0 {
			// The usual case: the message is the frame, read in place.
			// It stays valid until consume, which the caller runs after
			// checking it.
			c.in = c.in[n:]
			return p, true, nil
		}
		if c.msgOp == 0 {
			c.msgOp, c.msg = op, c.msg[:0]
		}
		c.msg = append(c.msg, p...)
		c.in = c.in[n:]
		if fin {
			c.msgOp = 0
			return c.msg, true, nil
		}
	}
}

// wsbDial opens a WebSocket connection to addr's WSPathEcho: the opening
// handshake, its answer checked (101, the accept key, no extension or
// subprotocol agreed), then one echo of payload, checked. It returns a
// duplicate of the socket's descriptor, non-blocking like Go's own, the
// net.Conn closed.
func wsbDial(addr string, payload []byte, rng *rand.ChaCha8) (fd int, err error) {
	c, err := net.DialTimeout("tcp", addr, ioTimeout)
	if err != nil {
		return -1, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(ioTimeout))
	var k [16]byte
	rng.Read(k[:])
	key := base64.StdEncoding.EncodeToString(k[:])
	req := "GET " + WSPathEcho + " HTTP/1.1\r\nHost: " + addr + "\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Key: " + key + "\r\nSec-WebSocket-Version: 13\r\n\r\n"
	if _, err := c.Write([]byte(req)); err != nil {
		return -1, err
	}
	// The server says nothing after its answer until the client speaks:
	// the head is all there is to read.
	var head []byte
	buf := make([]byte, 1024)
	for !bytes.Contains(head, []byte("\r\n\r\n")) {
		n, err := c.Read(buf)
		if err != nil {
			return -1, fmt.Errorf("handshake: %w after %q", err, head)
		}
		head = append(head, buf[:n]...)
	}
	if end := bytes.Index(head, []byte("\r\n\r\n")) + 4; end != len(head) {
		return -1, fmt.Errorf("handshake: %d bytes after the answer's head", len(head)-end)
	}
	resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(head)), nil)
	if err != nil {
		return -1, fmt.Errorf("handshake: %w", err)
	}
	switch {
	case resp.StatusCode != http.StatusSwitchingProtocols:
		return -1, fmt.Errorf("handshake: status %s", resp.Status)
	case resp.Header.Get("Sec-Websocket-Accept") != wsbAccept(key):
		return -1, fmt.Errorf("handshake: Sec-WebSocket-Accept %q, want %q", resp.Header.Get("Sec-Websocket-Accept"), wsbAccept(key))
	case resp.Header.Get("Sec-Websocket-Extensions") != "" || resp.Header.Get("Sec-Websocket-Protocol") != "":
		return -1, fmt.Errorf("handshake: extensions %q, subprotocol %q agreed, none offered",
			resp.Header.Get("Sec-Websocket-Extensions"), resp.Header.Get("Sec-Websocket-Protocol"))
	}
	var mk [4]byte
	binary.LittleEndian.PutUint32(mk[:], uint32(rng.Uint64()))
	if _, err := c.Write(wsbAppendFrame(nil, wsbOpBinary, payload, mk)); err != nil {
		return -1, err
	}
	wc := &wsbConn{}
	for {
		msg, ok, err := wc.next()
		if err != nil {
			return -1, fmt.Errorf("first echo: %w", err)
		}
		if ok {
			if !bytes.Equal(msg, payload) || len(wc.in) != 0 {
				return -1, fmt.Errorf("first echo: %d bytes, %d more after it; want the %d sent", len(msg), len(wc.in), len(payload))
			}
			break
		}
		n, err := c.Read(buf)
		if err != nil {
			return -1, fmt.Errorf("first echo: %w", err)
		}
		wc.in = append(wc.in, buf[:n]...)
	}
	raw, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		return -1, err
	}
	var derr error
	if cerr := raw.Control(func(s uintptr) { fd, derr = unix.FcntlInt(s, unix.F_DUPFD_CLOEXEC, 0) }); cerr != nil {
		return -1, cerr
	}
	return fd, derr
}

// wsbOpen opens n connections to addr with wsbDial, eight at a time
// (each first echo 64 bytes); on an error it closes those it opened.
func wsbOpen(addr string, n int) ([]*wsbConn, error) {
	conns := make([]*wsbConn, n)
	var (
		mu    sync.Mutex
		first error
		next  int
		wg    sync.WaitGroup
	)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.NewChaCha8([32]byte{byte(w), 'w', 's'})
			payload := make([]byte, 64)
			for {
				mu.Lock()
				i := next
				next++
				stop := first != nil || i >= n
				mu.Unlock()
				if stop {
					return
				}
				rng.Read(payload)
				fd, err := wsbDial(addr, payload, rng)
				mu.Lock()
				if err != nil && first == nil {
					first = fmt.Errorf("connection %d of %d: %w", i+1, n, err)
				}
				if err == nil {
					conns[i] = &wsbConn{fd: fd}
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if first != nil {
		wsbClose(conns)
		return nil, first
	}
	return conns, nil
}

// wsbClose closes every connection (without a closing handshake: the
// servers see end-of-file).
func wsbClose(conns []*wsbConn) {
	for _, c := range conns {
		if c != nil && c.fd >= 0 {
			unix.Close(c.fd)
			c.fd = -1
		}
	}
}

// wsbLoop is an epoll set over connections, run by one thread.
type wsbLoop struct {
	conns  []*wsbConn
	epfd   int
	events []unix.EpollEvent
	buf    []byte
	rng    *rand.ChaCha8
}

// openWSBLoop opens n connections to addr (wsbOpen) and an epoll set
// over them; close closes both.
func openWSBLoop(addr string, n int) (*wsbLoop, error) {
	conns, err := wsbOpen(addr, n)
	if err != nil {
		return nil, err
	}
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		wsbClose(conns)
		return nil, err
	}
	l := &wsbLoop{conns: conns, epfd: epfd, events: make([]unix.EpollEvent, 1024), buf: make([]byte, 256<<10),
		rng: rand.NewChaCha8([32]byte{'l', 'o', 'o', 'p'})}
	for i, c := range conns {
		ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(i)}
		if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, c.fd, &ev); err != nil {
			l.close()
			return nil, err
		}
	}
	return l, nil
}

// close closes the epoll set and the connections.
func (l *wsbLoop) close() {
	unix.Close(l.epfd)
	wsbClose(l.conns)
}

// send sends c.payload as a masked binary frame, behind whatever the
// socket did not take before.
func (l *wsbLoop) send(ci int) error {
	c := l.conns[ci]
	var key [4]byte
	binary.LittleEndian.PutUint32(key[:], uint32(l.rng.Uint64()))
	c.frame = wsbAppendFrame(c.frame[:0], wsbOpBinary, c.payload, key)
	return l.write(ci, c.frame)
}

// write writes p (nil: only what is queued) to connection ci; a
// remainder is queued and the connection watched for EPOLLOUT until it is
// gone. One message in flight per connection leaves the socket room in
// practice: this is for correctness.
func (l *wsbLoop) write(ci int, p []byte) error {
	c := l.conns[ci]
	queued := len(c.out) > 0
	if queued {
		c.out = append(c.out, p...)
		p = c.out
	}
	n, err := unix.Write(c.fd, p)
	if err != nil && err != unix.EAGAIN && err != unix.EINTR {
		return fmt.Errorf("connection %d: write: %w", ci, err)
	}
	n = max(n, 0)
	if queued {
		c.out = c.out[:copy(c.out, c.out[n:])]
	} else {
		c.out = append(c.out[:0], p[n:]...)
	}
	if blocked := len(c.out) > 0; blocked != queued {
		ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(ci)}
		if blocked {
			ev.Events |= unix.EPOLLOUT
		}
		if err := unix.EpollCtl(l.epfd, unix.EPOLL_CTL_MOD, c.fd, &ev); err != nil {
			return err
		}
	}
	return nil
}

// poll waits up to d for events and calls msg for each whole message
// received, on the connection's index; msg's slice is valid only during
// the call.
func (l *wsbLoop) poll(d time.Duration, msg func(ci int, p []byte) error) (int, error) {
	n, err := epollWaitFor(l.epfd, l.events, d)
	if err != nil {
		return 0, err
	}
	for _, ev := range l.events[:n] {
		ci := int(ev.Fd)
		c := l.conns[ci]
		if ev.Events&unix.EPOLLOUT != 0 {
			if err := l.write(ci, nil); err != nil {
				return n, err
			}
		}
		if ev.Events&(unix.EPOLLIN|unix.EPOLLHUP|unix.EPOLLERR) == 0 {
			continue
		}
		m, err := unix.Read(c.fd, l.buf)
		if err == unix.EAGAIN || err == unix.EINTR {
			continue
		}
		if err != nil {
			return n, fmt.Errorf("connection %d: read: %w", ci, err)
		}
		if m == 0 {
			return n, fmt.Errorf("connection %d: closed by the server", ci)
		}
		// Parse in place when nothing was left over from the last read:
		// the usual case, one whole message per read.
		inPlace := len(c.in) == 0
		if inPlace {
			c.in = l.buf[:m]
		} else {
			c.in = append(c.in, l.buf[:m]...)
		}
		for {
			p, ok, err := c.next()
			if err != nil {
				return n, fmt.Errorf("connection %d: %w", ci, err)
			}
			if !ok {
				break
			}
			if err := msg(ci, p); err != nil {
				return n, fmt.Errorf("connection %d: %w", ci, err)
			}
		}
		switch {
		case len(c.in) == 0:
			c.in = nil
		case inPlace:
			c.in = append([]byte(nil), c.in...) // l.buf is the next read's
		}
	}
	return n, nil
}

// wsbEchoResult is what one closed-loop run measured.
type wsbEchoResult struct {
	msgs int
	lat  []time.Duration // round trips, sorted
	wall time.Duration   // first send to last echo
}

// wsbPercentile returns the q-quantile of sorted durations.
func wsbPercentile(s []time.Duration, q float64) time.Duration {
	if len(s) == 0 {
		return 0
	}
	return s[min(int(q*float64(len(s))), len(s)-1)]
}

// echo runs the closed loop for d: every connection keeps one message of
// size bytes in flight (its first 8 bytes a sequence number, the rest
// random per connection), sending the next as soon as the echo has come
// and been checked byte for byte. After d it sends no more and waits for
// the echoes in flight.
func (l *wsbLoop) echo(d time.Duration, size int) (wsbEchoResult, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var r wsbEchoResult
	r.lat = make([]time.Duration, 0, 1<<20)
	seq := uint64(0)
	start := time.Now()
	for ci, c := range l.conns {
		if len(c.payload) != size {
			c.payload = make([]byte, size)
			l.rng.Read(c.payload)
		}
		seq++
		binary.LittleEndian.PutUint64(c.payload, seq)
		c.busy, c.sentAt = true, time.Since(start)
		if err := l.send(ci); err != nil {
			return r, err
		}
	}
	outstanding := len(l.conns)
	stopping := false
	var last time.Duration
	onMsg := func(ci int, p []byte) error {
		c := l.conns[ci]
		if !c.busy {
			return fmt.Errorf("a %d-byte message with no echo outstanding", len(p))
		}
		if !bytes.Equal(p, c.payload) {
			return fmt.Errorf("echo of %d bytes differs from the %d-byte message sent", len(p), len(c.payload))
		}
		at := time.Since(start)
		r.lat = append(r.lat, at-c.sentAt)
		r.msgs++
		last = at
		if stopping {
			c.busy = false
			outstanding--
			return nil
		}
		seq++
		binary.LittleEndian.PutUint64(c.payload, seq)
		c.sentAt = at
		return l.send(ci)
	}
	// After the last send, the echoes still due get ioTimeout from the
	// last one that came. A poll that returns nothing is not that time
	// passing: epollWaitFor returns 0 on EINTR too.
	var quietSince time.Time
	for outstanding > 0 {
		wait := ioTimeout
		if !stopping {
			if left := d - time.Since(start); left <= 0 {
				stopping, quietSince = true, time.Now()
			} else {
				wait = left
			}
		}
		if stopping {
			wait = ioTimeout - time.Since(quietSince)
			if wait <= 0 {
				return r, fmt.Errorf("%d echoes missing %v after the last send", outstanding, ioTimeout)
			}
		}
		before := r.msgs
		_, err := l.poll(wait, onMsg)
		if err != nil {
			return r, err
		}
		if stopping && r.msgs > before {
			quietSince = time.Now()
		}
	}
	slices.Sort(r.lat)
	r.wall = last
	return r, nil
}

// wsbBroadcastResult is one broadcast as the client saw it.
type wsbBroadcastResult struct {
	half, last time.Duration // from the request's write until half, then all, of the connections had the message
}

// broadcast asks the server for broadcast seq on ctl (GET /broadcast,
// keep-alive) and waits until every connection has received it, checked;
// then it checks the server's answer, "sent=N" for the N connections.
func (l *wsbLoop) broadcast(ctl net.Conn, addr string, seq uint64) (wsbBroadcastResult, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var r wsbBroadcastResult
	want := WSBroadcastPayload(seq)
	route := HTTPRoute{WSPathBroadcast + "?seq=" + strconv.FormatUint(seq, 10), "text/plain", "sent=" + strconv.Itoa(len(l.conns))}
	for _, c := range l.conns {
		c.got = false
	}
	got := 0
	start := time.Now()
	onMsg := func(ci int, p []byte) error {
		c := l.conns[ci]
		if c.got {
			return fmt.Errorf("a second message in broadcast %d", seq)
		}
		if !bytes.Equal(p, want) {
			return fmt.Errorf("broadcast %d: got %q, want %q", seq, p, want)
		}
		c.got = true
		got++
		if got == (len(l.conns)+1)/2 {
			r.half = time.Since(start)
		}
		if got == len(l.conns) {
			r.last = time.Since(start)
		}
		return nil
	}
	ctl.SetDeadline(time.Now().Add(ioTimeout))
	if _, err := ctl.Write(route.Request(addr)); err != nil {
		return r, err
	}
	// ioTimeout from the last copy that came; an empty poll may be EINTR.
	quietSince := time.Now()
	for got < len(l.conns) {
		wait := ioTimeout - time.Since(quietSince)
		if wait <= 0 {
			return r, fmt.Errorf("broadcast %d: %d of %d connections without it after %v", seq, len(l.conns)-got, len(l.conns), ioTimeout)
		}
		before := got
		if _, err := l.poll(wait, onMsg); err != nil {
			return r, err
		}
		if got > before {
			quietSince = time.Now()
		}
	}
	buf := make([]byte, 0, 512)
	for {
		resp, err := ParseHTTPResponse(buf)
		if err == nil {
			if err := route.Check(resp); err != nil {
				return r, err
			}
			if resp.Len != len(buf) {
				return r, fmt.Errorf("%d bytes after /broadcast's answer", len(buf)-resp.Len)
			}
			return r, nil
		}
		if !errors.Is(err, errIncomplete) {
			return r, err
		}
		if len(buf) == cap(buf) {
			buf = slices.Grow(buf, len(buf))
		}
		m, err := ctl.Read(buf[len(buf):cap(buf)])
		if err != nil {
			return r, fmt.Errorf("/broadcast's answer: %w after %q", err, buf)
		}
		buf = buf[:len(buf)+m]
	}
}
