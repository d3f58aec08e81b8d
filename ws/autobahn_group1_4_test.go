package ws_test

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/gracepoll/gracepoll/ws"
)

// Groups 1-4: framing, pings and pongs, reserved bits, reserved opcodes.

// abPayload is a payload of n octets for op: '*' for text, 0xfe for
// binary, as Autobahn's.
func abPayload(op ws.Opcode, n int) []byte {
	if op == ws.OpText {
		return bytes.Repeat([]byte{'*'}, n)
	}
	return bytes.Repeat([]byte{0xfe}, n)
}

// abEchoCase sends payload as one frame, written in chops of chop octets
// (0: one write), and expects it echoed, then a clean close.
func abEchoCase(op ws.Opcode, payload []byte, chop int) func(*testing.T, *rawClient) {
	return func(t *testing.T, c *rawClient) {
		f := c.frame(true, 0, op, payload)
		if chop > 0 {
			c.chop(f, chop, 0)
		} else {
			c.write(f)
		}
		c.expectMessage(op, payload)
		c.closeNormal()
	}
}

// 1.1.x text and 1.2.x binary messages at the lengths around the length
// encodings' boundaries, and a 64 KiB one chopped into 997-octet writes.
func abGroup1() []abCase {
	var cs []abCase
	for g, op := range []ws.Opcode{ws.OpText, ws.OpBinary} {
		for i, n := range []int{0, 125, 126, 127, 128, 65535, 65536} {
			cs = append(cs, abCase{
				ID:   fmt.Sprintf("1.%d.%d", g+1, i+1),
				Desc: fmt.Sprintf("Send %v message with payload of length %d.", op, n),
				Run:  abEchoCase(op, abPayload(op, n), 0),
			})
		}
		cs = append(cs, abCase{
			ID:   fmt.Sprintf("1.%d.8", g+1),
			Desc: fmt.Sprintf("Send %v message with payload of length 65536, sent out in chops of 997 octets.", op),
			Run:  abEchoCase(op, abPayload(op, 65536), 997),
		})
	}
	return cs
}

func abGroup2() []abCase {
	pingCase := func(payload []byte, mode abChopMode) func(*testing.T, *rawClient) {
		return func(t *testing.T, c *rawClient) {
			c.send(mode, c.frame(true, 0, ws.OpPing, payload))
			c.expectPong(payload)
			c.closeNormal()
		}
	}
	tenPings := func(mode abChopMode) func(*testing.T, *rawClient) {
		return func(t *testing.T, c *rawClient) {
			var frames [][]byte
			for i := range 10 {
				frames = append(frames, c.frame(true, 0, ws.OpPing, fmt.Appendf(nil, "payload-%d", i)))
			}
			c.send(mode, frames...)
			for i := range 10 {
				c.expectPong(fmt.Appendf(nil, "payload-%d", i))
			}
			c.closeNormal()
		}
	}
	return []abCase{
		{ID: "2.1", Desc: "Send ping without payload.", Run: pingCase(nil, abOneChop)},
		{ID: "2.2", Desc: "Send ping with small text payload.", Run: pingCase([]byte("Hello, world!"), abOneChop)},
		{ID: "2.3", Desc: "Send ping with small binary (non UTF-8) payload.",
			Run: pingCase([]byte{0x00, 0xff, 0xfe, 0xfd, 0xfc, 0xfb, 0x00, 0xff}, abOneChop)},
		{ID: "2.4", Desc: "Send ping with binary payload of 125 octets.", Run: pingCase(bytes.Repeat([]byte{0xfe}, 125), abOneChop)},
		{ID: "2.5", Desc: "Send ping with binary payload of 126 octets: the connection is failed.",
			Run: func(t *testing.T, c *rawClient) {
				c.sendFrame(true, 0, ws.OpPing, bytes.Repeat([]byte{0xfe}, 126))
				c.expectClose(1002)
			}},
		{ID: "2.6", Desc: "Send ping with binary payload of 125 octets, sent out octet-wise.",
			Run: pingCase(bytes.Repeat([]byte{0xfe}, 125), abOctetChops)},
		{ID: "2.7", Desc: "Send unsolicited pong without payload: nothing is answered.",
			Run: func(t *testing.T, c *rawClient) {
				c.sendFrame(true, 0, ws.OpPong, nil)
				c.closeNormal()
			}},
		{ID: "2.8", Desc: "Send unsolicited pong with payload: nothing is answered.",
			Run: func(t *testing.T, c *rawClient) {
				c.sendFrame(true, 0, ws.OpPong, []byte("unsolicited pong payload"))
				c.closeNormal()
			}},
		{ID: "2.9", Desc: "Send unsolicited pong with payload, then ping with payload: only the ping is answered.",
			Run: func(t *testing.T, c *rawClient) {
				c.send(abOneChop, c.frame(true, 0, ws.OpPong, []byte("unsolicited pong payload")),
					c.frame(true, 0, ws.OpPing, []byte("ping payload")))
				c.expectPong([]byte("ping payload"))
				c.closeNormal()
			}},
		{ID: "2.10", Desc: "Send 10 pings with payload: 10 pongs in order.", Run: tenPings(abOneChop)},
		{ID: "2.11", Desc: "Send 10 pings with payload, sent out octet-wise: 10 pongs in order.", Run: tenPings(abOctetChops)},
	}
}

// abRSVCase sends a valid text message, then one with reserved bits rsv,
// then a ping, all in mode: the first is echoed, the second fails the
// connection, and the ping is not answered.
func abRSVCase(rsv byte, mode abChopMode) func(*testing.T, *rawClient) {
	return func(t *testing.T, c *rawClient) {
		msg := []byte("Hello, world!")
		c.send(mode, c.frame(true, 0, ws.OpText, msg), c.frame(true, rsv, ws.OpText, msg),
			c.frame(true, 0, ws.OpPing, nil))
		c.expectMessage(ws.OpText, msg)
		c.expectClose(1002)
	}
}

// abFailCase sends one frame that must fail the connection with code.
func abFailCase(fin bool, rsv byte, op ws.Opcode, payload []byte, code int) func(*testing.T, *rawClient) {
	return func(t *testing.T, c *rawClient) {
		c.sendFrame(fin, rsv, op, payload)
		c.expectClose(code)
	}
}

func abGroup3() []abCase {
	return []abCase{
		{ID: "3.1", Desc: "Send small text message with RSV = 1.", Run: abFailCase(true, 1, ws.OpText, []byte("Hello, world!"), 1002)},
		{ID: "3.2", Desc: "Send small text message, then again with RSV = 2, then ping.", Run: abRSVCase(2, abOneChop)},
		{ID: "3.3", Desc: "Send small text message, then again with RSV = 3, then ping, frame-wise.", Run: abRSVCase(3, abFrameChops)},
		{ID: "3.4", Desc: "Send small text message, then again with RSV = 4, then ping, octet-wise.", Run: abRSVCase(4, abOctetChops)},
		{ID: "3.5", Desc: "Send small binary message with RSV = 5.",
			Run: abFailCase(true, 5, ws.OpBinary, []byte{0x00, 0xff, 0xfe, 0xfd, 0xfc, 0xfb, 0x00, 0xff}, 1002)},
		{ID: "3.6", Desc: "Send ping with RSV = 6.", Run: abFailCase(true, 6, ws.OpPing, []byte("Hello, world!"), 1002)},
		{ID: "3.7", Desc: "Send close with RSV = 7.", Run: abFailCase(true, 7, ws.OpClose, nil, 1002)},
	}
}

// abGroup4: 4.1.x the reserved data opcodes 3-7, 4.2.x the reserved
// control opcodes 0xB-0xF: alone, with a payload, and after a valid
// message (echoed) and before a ping (not answered).
func abGroup4() []abCase {
	var cs []abCase
	for g, base := range []ws.Opcode{3, 11} {
		kind := "non-control"
		if g == 1 {
			kind = "control"
		}
		payload := []byte("reserved opcode payload")
		cs = append(cs,
			abCase{ID: fmt.Sprintf("4.%d.1", g+1), Desc: fmt.Sprintf("Send frame with reserved %s opcode %d.", kind, base),
				Run: abFailCase(true, 0, base, nil, 1002)},
			abCase{ID: fmt.Sprintf("4.%d.2", g+1), Desc: fmt.Sprintf("Send frame with reserved %s opcode %d and non-empty payload.", kind, base+1),
				Run: abFailCase(true, 0, base+1, payload, 1002)})
		for i, op := range []ws.Opcode{base + 2, base + 3, base + 4} {
			var p []byte
			if i > 0 {
				p = payload
			}
			cs = append(cs, abCase{
				ID:   fmt.Sprintf("4.%d.%d", g+1, i+3),
				Desc: fmt.Sprintf("Send small text message, then frame with reserved %s opcode %d (payload %d octets), then ping.", kind, op, len(p)),
				Run: func(t *testing.T, c *rawClient) {
					msg := []byte("Hello, world!")
					c.send(abOneChop, c.frame(true, 0, ws.OpText, msg), c.frame(true, 0, op, p), c.frame(true, 0, ws.OpPing, nil))
					c.expectMessage(ws.OpText, msg)
					c.expectClose(1002)
				}})
		}
	}
	return cs
}
