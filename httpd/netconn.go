package httpd

import (
	"errors"
	"io"
	"net"
	"net/http"
	"time"
)

// errNotHijacked fails I/O on the net.Conn that ConnState receives for a
// connection its handler did not hijack: the server does that I/O.
var errNotHijacked = errors.New("httpd: connection not hijacked")

// netConn is a connection as a net.Conn: what ConnState receives and
// Hijack returns. Reads and writes work once it is hijacked: reads take
// what the waiter feeds (stream.Read, without the body's stall bound: an
// upgraded connection may idle for hours), writes queue on the connection
// and wait while more than HighWater is queued.
type netConn struct {
	hc            *hconn
	local, remote net.Addr
	st            *stream // set by hijack
}

// netConn returns the connection's net.Conn, made on first use. Waiter
// only.
func (hc *hconn) netConn() *netConn {
	if hc.nc == nil {
		hc.nc = &netConn{hc: hc, local: hc.c.LocalAddr(), remote: hc.c.RemoteAddr()}
	}
	return hc.nc
}

// hijack hands the connection to the handler: from now on the waiter
// feeds it every byte that arrives, until the net.Conn is closed or the
// server shuts down.
func (st *stream) hijack() *netConn {
	st.mu.Lock()
	st.hijacked = true
	if st.bodyErr == io.EOF {
		st.bodyErr = nil
	}
	// The request's deadlines (ReadTimeout, WriteTimeout) end with it, as
	// net/http's Hijack clears its connection's.
	st.deadline, st.wdeadline = time.Time{}, time.Time{}
	st.mu.Unlock()
	st.hc.c.SetWriteDeadline(time.Time{})
	nc := st.hc.nc
	if nc == nil {
		// Made here, not for every upgrade: a WebSocket (Switch) has no
		// use for it. The waiter touches hc.nc only for ConnState, and
		// then startStream made it.
		c := st.hc.c
		nc = &netConn{hc: st.hc, local: c.LocalAddr(), remote: c.RemoteAddr()}
		st.hc.nc = nc
	}
	nc.st = st
	st.hc.h.connState(st.hc, http.StateHijacked)
	// Not held: Shutdown closes a hijacked connection as it begins, as
	// the handler's protocol is not the server's to finish.
	st.unhold()
	st.resume()
	return nc
}

func (nc *netConn) Read(p []byte) (int, error) {
	if nc.st == nil {
		return 0, errNotHijacked
	}
	return nc.st.read(p, false)
}

func (nc *netConn) Write(p []byte) (int, error) {
	if nc.st == nil {
		return 0, errNotHijacked
	}
	n, err := nc.hc.c.Write(p)
	if err != nil {
		return n, err
	}
	return n, nc.st.waitDrain(nc.st.ctx)
}

// Close closes the connection gracefully (conn.Conn.Close: what was
// written is flushed first).
func (nc *netConn) Close() error {
	if nc.st == nil {
		return errNotHijacked
	}
	err := nc.hc.c.Close()
	nc.st.mu.Lock()
	nc.st.finished = true
	nc.st.mu.Unlock()
	nc.st.release()
	nc.st.unhold()
	return err
}

func (nc *netConn) LocalAddr() net.Addr  { return nc.local }
func (nc *netConn) RemoteAddr() net.Addr { return nc.remote }

func (nc *netConn) SetDeadline(t time.Time) error {
	nc.SetReadDeadline(t)
	return nc.SetWriteDeadline(t)
}

func (nc *netConn) SetReadDeadline(t time.Time) error {
	if nc.st == nil {
		return errNotHijacked
	}
	nc.st.setDeadline(t)
	return nil
}

func (nc *netConn) SetWriteDeadline(t time.Time) error { return nc.hc.c.SetWriteDeadline(t) }
