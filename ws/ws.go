package ws

import (
	"errors"
	"fmt"
	"strconv"
	"time"
)

// Opcode is a frame's opcode (RFC 6455 section 5.2).
type Opcode byte

// The opcodes. OpContinuation appears only in frames on the wire; a
// message is OpText or OpBinary.
const (
	OpContinuation Opcode = 0x0
	OpText         Opcode = 0x1
	OpBinary       Opcode = 0x2
	OpClose        Opcode = 0x8
	OpPing         Opcode = 0x9
	OpPong         Opcode = 0xA
)

func (op Opcode) String() string {
	switch op {
	case OpContinuation:
		return "continuation"
	case OpText:
		return "text"
	case OpBinary:
		return "binary"
	case OpClose:
		return "close"
	case OpPing:
		return "ping"
	case OpPong:
		return "pong"
	}
	return "Opcode(" + strconv.Itoa(int(op)) + ")"
}

// control reports a control frame's opcode (ping, pong, close, and the
// reserved 0xB-0xF).
func (op Opcode) control() bool { return op&0x8 != 0 }

// StatusCode is a close frame's status code (RFC 6455 section 7.4).
type StatusCode uint16

// Status codes (RFC 6455 section 7.4.1 and the IANA registry).
// StatusNoStatus and StatusAbnormal are never sent: they report a close
// frame without a code, and a connection that ended without one.
const (
	StatusNormal          StatusCode = 1000
	StatusGoingAway       StatusCode = 1001
	StatusProtocolError   StatusCode = 1002
	StatusUnsupportedData StatusCode = 1003
	StatusNoStatus        StatusCode = 1005
	StatusAbnormal        StatusCode = 1006
	StatusInvalidData     StatusCode = 1007
	StatusPolicyViolation StatusCode = 1008
	StatusTooBig          StatusCode = 1009
	StatusMandatoryExt    StatusCode = 1010
	StatusInternalError   StatusCode = 1011
	StatusServiceRestart  StatusCode = 1012
	StatusTryAgainLater   StatusCode = 1013
	StatusBadGateway      StatusCode = 1014
)

// sendable reports a code that may appear in a close frame: 1000-1003,
// 1007-1014 (assigned by RFC 6455 and the IANA registry), and 3000-4999
// (registered libraries and private use). 1004-1006, 1015 and the rest
// of 0-2999 are refused with 1002.
func (s StatusCode) sendable() bool {
	return s >= 1000 && s <= 1003 || s >= 1007 && s <= 1014 || s >= 3000 && s <= 4999
}

// Sentinel errors. Test with errors.Is: a CloseError unwraps to the
// cause of a connection's end.
var (
	// ErrBadHandshake reports an upgrade request (or, to Dial, a
	// response) that is not a valid WebSocket opening handshake.
	ErrBadHandshake = errors.New("ws: bad handshake")
	// ErrNotHttpd reports an Upgrade whose http.ResponseWriter is not an
	// httpd.Server's (net/http's, for instance), which cannot hand the
	// connection over: Upgrade answers 500 instead of switching. The
	// error also matches httpd.ErrNotUpgrade, which httpd.Switch returns
	// for such a ResponseWriter.
	ErrNotHttpd = errors.New("ws: Upgrade needs an httpd.Server")
	// ErrOrigin reports an upgrade request that Upgrader.CheckOrigin
	// (or the default same-origin check) refused.
	ErrOrigin = errors.New("ws: origin not allowed")
	// ErrProtocol reports a peer that broke RFC 6455 (a reserved bit or
	// opcode, an unmasked client frame, a fragmented control frame...):
	// the connection is failed with 1002.
	ErrProtocol = errors.New("ws: protocol error")
	// ErrInvalidUTF8 reports a text message or close reason that is not
	// UTF-8: the connection is failed with 1007.
	ErrInvalidUTF8 = errors.New("ws: invalid UTF-8 in text")
	// ErrTooBig reports a message beyond the size limit (compressed or
	// not): the connection is failed with 1009.
	ErrTooBig = errors.New("ws: message too big")
	// ErrSlowReader reports a peer that did not take its messages: a
	// write found more than conn's Options.HighWater queued and would
	// have taken the queue past Options.MaxQueued. The connection is
	// reset; the error wraps conn.ErrQueueFull.
	ErrSlowReader = errors.New("ws: peer too slow to read: output queue full")
	// ErrCloseTimeout reports a peer that did not answer our close frame
	// within Upgrader.CloseTimeout.
	ErrCloseTimeout = errors.New("ws: no close frame in answer to ours")
	// ErrPingTimeout reports a peer that sent nothing, not even a pong,
	// for two Upgrader.PingInterval.
	ErrPingTimeout = errors.New("ws: peer silent after a ping")
	// ErrClosed reports a write or close after the close frame was sent
	// or the connection ended.
	ErrClosed = errors.New("ws: connection closed")
	// ErrInvalid reports a bad argument: an opcode that is not a
	// message's, a close code that may not be sent, a control payload
	// over 125 bytes, a text message that is not UTF-8, bad options.
	ErrInvalid = errors.New("ws: invalid argument")
)

// CloseError is how a connection ended: the status code and reason of
// the close frame that ended it (the peer's, or ours when we failed the
// connection or timed out), and the cause when it was not a clean close
// handshake. Code is StatusAbnormal when no close frame was exchanged.
type CloseError struct {
	Code   StatusCode
	Reason string
	// Remote reports that the peer sent the close frame first.
	Remote bool
	// Err is the cause: ErrProtocol, ErrInvalidUTF8, ErrTooBig,
	// ErrSlowReader, ErrCloseTimeout, ErrPingTimeout, or the connection's
	// error; nil after a close handshake, and after httpd's Shutdown sent
	// 1001 (the peer's answer is not awaited: Shutdown stops reading).
	// Err is nil too when the server closed after the peer's close frame
	// without waiting for the peer to close TCP.
	Err error
}

func (e *CloseError) Error() string {
	s := fmt.Sprintf("ws: closed with %d", e.Code)
	if e.Reason != "" {
		s += " " + strconv.Quote(e.Reason)
	}
	if e.Remote {
		s += " by the peer"
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

func (e *CloseError) Unwrap() error { return e.Err }

// Defaults of Upgrader's and Dialer's fields, used where a field is zero.
const (
	DefaultMaxMessageSize = 1 << 20
	DefaultCloseTimeout   = 5 * time.Second
)
