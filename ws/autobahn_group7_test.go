package ws_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/gracepoll/gracepoll/ws"
)

// Group 7: the close handshake. The server echoes a valid close frame's
// code and closes the TCP connection; nothing after a close frame is
// answered; an invalid close frame fails the connection.

func abGroup7() []abCase {
	normal := abClosePayload(1000, "")
	hello := []byte("Hello World!")
	// closeThen sends frames after a close frame, all in one write: only
	// the close is answered.
	closeThen := func(after ...func(c *rawClient) []byte) func(*testing.T, *rawClient) {
		return func(t *testing.T, c *rawClient) {
			frames := [][]byte{c.frame(true, 0, ws.OpClose, normal)}
			for _, f := range after {
				frames = append(frames, f(c))
			}
			c.send(abOneChop, frames...)
			c.expectClose(1000)
		}
	}
	closeWith := func(payload []byte, code int) func(*testing.T, *rawClient) {
		return func(t *testing.T, c *rawClient) {
			c.sendFrame(true, 0, ws.OpClose, payload)
			c.expectClose(code)
		}
	}
	cs := []abCase{
		{ID: "7.1.1", Desc: "Send a message followed by a close frame.",
			Run: func(t *testing.T, c *rawClient) {
				c.send(abOneChop, c.frame(true, 0, ws.OpText, hello), c.frame(true, 0, ws.OpClose, normal))
				c.expectMessage(ws.OpText, hello)
				c.expectClose(1000)
			}},
		{ID: "7.1.2", Desc: "Send two close frames: only the first is answered.",
			Run: closeThen(func(c *rawClient) []byte { return c.frame(true, 0, ws.OpClose, normal) })},
		{ID: "7.1.3", Desc: "Send a ping after the close frame: it is not answered.",
			Run: closeThen(func(c *rawClient) []byte { return c.frame(true, 0, ws.OpPing, []byte("Hello World!")) })},
		{ID: "7.1.4", Desc: "Send a text message after the close frame: it is not echoed.",
			Run: closeThen(func(c *rawClient) []byte { return c.frame(true, 0, ws.OpText, hello) })},
		{ID: "7.1.5", Desc: "Send a message's first fragment, the close frame, then its last fragment: nothing is echoed.",
			Run: func(t *testing.T, c *rawClient) {
				c.send(abOneChop, c.frame(false, 0, ws.OpText, []byte("fragment1")), c.frame(true, 0, ws.OpClose, normal),
					c.frame(true, 0, ws.OpContinuation, []byte("fragment2")))
				c.expectClose(1000)
			}},
		// Autobahn leaves 7.1.6's outcome to the implementation (the
		// close may overtake the echo in an asynchronous server); this
		// server handles input in order, so the echo comes first.
		{ID: "7.1.6", Desc: "Send a 256 KiB message followed by a close frame, then a ping: the message is echoed, the ping not answered.",
			Run: func(t *testing.T, c *rawClient) {
				big := []byte(strings.Repeat("BAsd7&jh23", 256<<10/10))
				c.send(abOneChop, c.frame(true, 0, ws.OpText, big), c.frame(true, 0, ws.OpClose, normal),
					c.frame(true, 0, ws.OpPing, []byte("Hello World!")))
				c.expectMessage(ws.OpText, big)
				c.expectClose(1000)
			}},
		{ID: "7.3.1", Desc: "Send close with payload length 0 (no code): an empty close is echoed.", Run: closeWith(nil, abNoCode)},
		{ID: "7.3.2", Desc: "Send close with payload length 1.", Run: closeWith([]byte{'a'}, 1002)},
		{ID: "7.3.3", Desc: "Send close with payload length 2 (code 1000, no reason).", Run: closeWith(normal, 1000)},
		{ID: "7.3.4", Desc: "Send close with code 1000 and a reason.", Run: closeWith(abClosePayload(1000, "Hello World!"), 1000)},
		{ID: "7.3.5", Desc: "Send close with code 1000 and a 123-octet reason (payload 125).",
			Run: closeWith(abClosePayload(1000, strings.Repeat("*", 123)), 1000)},
		{ID: "7.3.6", Desc: "Send close with code 1000 and a 124-octet reason (payload 126): too long for a control frame.",
			Run: closeWith(abClosePayload(1000, strings.Repeat("*", 124)), 1002)},
		{ID: "7.5.1", Desc: "Send close with a reason that is not UTF-8.", Run: closeWith(abClosePayload(1000, abInvalidKosme), 1007)},
	}
	for i, code := range []uint16{1000, 1001, 1002, 1003, 1007, 1008, 1009, 1010, 1011, 3000, 3999, 4000, 4999} {
		cs = append(cs, abCase{
			ID:   fmt.Sprintf("7.7.%d", i+1),
			Desc: fmt.Sprintf("Send close with valid close code %d: it is echoed.", code),
			Run:  closeWith(abClosePayload(code, ""), int(code)),
		})
	}
	for i, code := range []uint16{0, 999, 1004, 1005, 1006, 1016, 1100, 2000, 2999} {
		cs = append(cs, abCase{
			ID:   fmt.Sprintf("7.9.%d", i+1),
			Desc: fmt.Sprintf("Send close with invalid close code %d.", code),
			Run:  closeWith(abClosePayload(code, ""), 1002),
		})
	}
	// 7.13.x are informational in Autobahn; RFC 6455 section 7.4.2 leaves
	// no code above 4999 valid, so strictly they fail the connection.
	for i, code := range []uint16{5000, 65535} {
		cs = append(cs, abCase{
			ID:   fmt.Sprintf("7.13.%d", i+1),
			Desc: fmt.Sprintf("Send close with close code %d.", code),
			Run:  closeWith(abClosePayload(code, ""), 1002),
		})
	}
	return cs
}
