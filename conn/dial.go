package conn

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"

	"github.com/gracepoll/gracepoll/poller"
)

// Dial connects to address on network ("tcp", "tcp4", "tcp6" or "unix")
// and serves the connection with h (nil: the server's Handler) as if it
// had been accepted: OnOpen, OnData, OnClose. The connect blocks no
// waiter: the socket is non-blocking, its completion is a Writable event,
// and SO_ERROR says how it went. Dial waits for that; when ctx ends first,
// the attempt is aborted at once and Dial returns ctx's error. Shutdown and
// Close cancel pending dials: a destroy never waits for an outstanding
// connect. A failed or cancelled dial runs no handler method and leaves no
// fd behind. From a handler Dial returns ErrInCallback: its connect may
// complete on the very waiter it would block.
func (s *Server) Dial(ctx context.Context, network, address string, h Handler) (*Conn, error) {
	return s.dial(ctx, network, address, h, nil)
}

// dial is Dial, and DialTLS with a TLS config.
func (s *Server) dial(ctx context.Context, network, address string, h Handler, config *tls.Config) (*Conn, error) {
	if s.closing.Load() {
		return nil, closedError{"server is closed"}
	}
	if s.p.InCallback() {
		return nil, ErrInCallback
	}
	sa, err := resolve(ctx, network, address)
	if err != nil {
		return nil, err
	}
	fd, pending, err := connect(sa)
	if err != nil {
		return nil, err
	}
	result := make(chan error, 1)
	events := poller.Writable
	switch {
	case pending:
	case config != nil: // connected: the handshake starts at once
		events = 0
	default:
		events, result = poller.Readable, nil
	}
	secure := config != nil
	c, err := s.register(fd, h, events, result, config, secure && !pending)
	if err != nil {
		closeFD(fd)
		if errors.Is(err, poller.ErrClosed) {
			return nil, closedError{"server is closed"}
		}
		return nil, err
	}
	switch {
	case pending:
	case secure:
		c.mu.Lock()
		if c.state == stOpen {
			s.armHandshakeLocked(c)
			s.startHandshakeLocked(c)
		}
		c.mu.Unlock()
	default:
		c.startDeadlines()
		c.open.Do(func() { s.openAccepted(c) })
		return c, nil
	}
	select {
	case err := <-result:
		if err != nil {
			return nil, err
		}
		return c, nil
	case <-ctx.Done():
		c.mu.Lock()
		if c.connExt != nil && c.dial != nil {
			c.cancelDialLocked(ctx.Err())
		}
		c.mu.Unlock()
		if err := <-result; err != nil {
			return nil, err
		}
		return c, nil // connected just before the cancellation
	}
}

// cancelDialLocked ends a pending connect with err: the registration is
// deleted (the poller closes the socket after the grace period) and no
// handler method runs. flagDialing stays set: an event already copied out
// for the connection (the connect completing as it is cancelled) must
// still go through connected, which refuses it, and not on to OnOpen. The
// caller holds mu.
func (c *Conn) cancelDialLocked(err error) {
	c.dial <- err
	c.dial, c.dialFailed = nil, true
	c.setReasonLocked(ReasonError, err)
	c.endLocked()
}

// connected completes a pending connect on its first event, on the
// connection's waiter. It reports whether the connection is open.
func (s *Server) connected(c *Conn, e poller.Event) bool {
	testHookConnected()
	c.mu.Lock()
	if c.connExt == nil || c.dial == nil {
		open := c.connExt == nil || !c.dialFailed
		c.mu.Unlock()
		return open
	}
	if err := connectResult(c.fd); err != nil {
		c.cancelDialLocked(fmt.Errorf("conn: dial: %w", err))
		c.mu.Unlock()
		return false
	}
	if c.flags.Load()&flagTLS != 0 {
		// Connected; the TLS handshake follows, and its end completes
		// the dial (tls.go).
		c.flags.Or(flagHandshake)
		c.setEventsLocked(poller.Writable)
		c.updateLocked()
		s.armHandshakeLocked(c)
		s.startHandshakeLocked(c)
		c.mu.Unlock()
		return false
	}
	c.dial <- nil
	c.dial = nil
	c.flags.And(^uint32(flagDialing))
	c.setEventsLocked(poller.Writable) // what is registered now; updateLocked swaps in Readable
	c.updateLocked()
	c.mu.Unlock()
	c.startDeadlines()
	return true
}

// resolve turns network and address into a socket address, honouring
// ctx for name lookups.
func resolve(ctx context.Context, network, address string) (sockAddr, error) {
	switch network {
	case "unix":
		return sockAddr{unix: address}, nil
	case "tcp", "tcp4", "tcp6":
	default:
		return sockAddr{}, fmt.Errorf("%w: network %q: want tcp, tcp4, tcp6 or unix", ErrInvalid, network)
	}
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return sockAddr{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	pn, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		p, lerr := net.DefaultResolver.LookupPort(ctx, "tcp", port)
		if lerr != nil {
			return sockAddr{}, fmt.Errorf("%w: port %q: %w", ErrInvalid, port, lerr)
		}
		pn = uint64(p)
	}
	ipNet := map[string]string{"tcp": "ip", "tcp4": "ip4", "tcp6": "ip6"}[network]
	ips, err := net.DefaultResolver.LookupNetIP(ctx, ipNet, host)
	if err != nil {
		if ctx.Err() != nil {
			return sockAddr{}, ctx.Err()
		}
		return sockAddr{}, fmt.Errorf("conn: dial: %w", err)
	}
	if len(ips) == 0 {
		return sockAddr{}, fmt.Errorf("conn: dial: no address for %q", host)
	}
	return sockAddr{ip: netip.AddrPortFrom(ips[0].Unmap(), uint16(pn))}, nil
}

// sockAddr is a TCP or a Unix address to connect to.
type sockAddr struct {
	ip   netip.AddrPort
	unix string
}
