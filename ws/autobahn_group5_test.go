package ws_test

import (
	"testing"

	"github.com/gracepoll/gracepoll/ws"
)

// Group 5: fragmentation.

func abGroup5() []abCase {
	f1, f2 := []byte("fragment1"), []byte("fragment2")
	fragmentedControl := func(op ws.Opcode) func(*testing.T, *rawClient) {
		return func(t *testing.T, c *rawClient) {
			c.send(abOneChop, c.frame(false, 0, op, f1), c.frame(true, 0, ws.OpContinuation, f2))
			c.expectClose(1002)
		}
	}
	twoFragments := func(mode abChopMode) func(*testing.T, *rawClient) {
		return func(t *testing.T, c *rawClient) {
			c.send(mode, c.frame(false, 0, ws.OpText, f1), c.frame(true, 0, ws.OpContinuation, f2))
			c.expectMessage(ws.OpText, []byte("fragment1fragment2"))
			c.closeNormal()
		}
	}
	pingBetween := func(mode abChopMode) func(*testing.T, *rawClient) {
		return func(t *testing.T, c *rawClient) {
			ping := []byte("ping payload")
			c.send(mode, c.frame(false, 0, ws.OpText, f1), c.frame(true, 0, ws.OpPing, ping),
				c.frame(true, 0, ws.OpContinuation, f2))
			c.expectPong(ping)
			c.expectMessage(ws.OpText, []byte("fragment1fragment2"))
			c.closeNormal()
		}
	}
	// A continuation frame with no message to continue, then a valid
	// text message: the first fails the connection, the second is not
	// echoed.
	orphan := func(fin bool, mode abChopMode) func(*testing.T, *rawClient) {
		return func(t *testing.T, c *rawClient) {
			c.send(mode, c.frame(fin, 0, ws.OpContinuation, []byte("non-continuation payload")),
				c.frame(true, 0, ws.OpText, []byte("Hello, world!")))
			c.expectClose(1002)
		}
	}
	orphanTwice := func(fin bool) func(*testing.T, *rawClient) {
		return func(t *testing.T, c *rawClient) {
			var frames [][]byte
			for range 2 {
				frames = append(frames, c.frame(fin, 0, ws.OpContinuation, f1),
					c.frame(false, 0, ws.OpText, f2), c.frame(true, 0, ws.OpContinuation, []byte("fragment3")))
			}
			c.send(abOneChop, frames...)
			c.expectClose(1002)
		}
	}
	// 5.19 and 5.20: a text message in five fragments with a ping after
	// the second and the fourth, and a pause after the first ping, whose
	// pong must come during the pause.
	pauseMidMessage := func(mode abChopMode) func(*testing.T, *rawClient) {
		return func(t *testing.T, c *rawClient) {
			p1, p2 := []byte("pongme 1!"), []byte("pongme 2!")
			c.send(mode, c.frame(false, 0, ws.OpText, f1), c.frame(false, 0, ws.OpContinuation, f2),
				c.frame(true, 0, ws.OpPing, p1))
			c.expectPong(p1)
			c.expectSilence(abWait)
			c.send(mode, c.frame(false, 0, ws.OpContinuation, []byte("fragment3")),
				c.frame(false, 0, ws.OpContinuation, []byte("fragment4")), c.frame(true, 0, ws.OpPing, p2),
				c.frame(true, 0, ws.OpContinuation, []byte("fragment5")))
			c.expectPong(p2)
			c.expectMessage(ws.OpText, []byte("fragment1fragment2fragment3fragment4fragment5"))
			c.closeNormal()
		}
	}
	return []abCase{
		{ID: "5.1", Desc: "Send ping fragmented into 2 fragments.", Run: fragmentedControl(ws.OpPing)},
		{ID: "5.2", Desc: "Send pong fragmented into 2 fragments.", Run: fragmentedControl(ws.OpPong)},
		{ID: "5.3", Desc: "Send text message fragmented into 2 fragments.", Run: twoFragments(abOneChop)},
		{ID: "5.4", Desc: "Send text message fragmented into 2 fragments, frame-wise.", Run: twoFragments(abFrameChops)},
		{ID: "5.5", Desc: "Send text message fragmented into 2 fragments, octet-wise.", Run: twoFragments(abOctetChops)},
		{ID: "5.6", Desc: "Send text message fragmented into 2 fragments, one ping with payload in-between.", Run: pingBetween(abOneChop)},
		{ID: "5.7", Desc: "As 5.6, frame-wise.", Run: pingBetween(abFrameChops)},
		{ID: "5.8", Desc: "As 5.6, octet-wise.", Run: pingBetween(abOctetChops)},
		{ID: "5.9", Desc: "Send unfragmented text message after continuation frame with FIN = true, where there is no message to continue.",
			Run: orphan(true, abOneChop)},
		{ID: "5.10", Desc: "As 5.9, frame-wise.", Run: orphan(true, abFrameChops)},
		{ID: "5.11", Desc: "As 5.9, octet-wise.", Run: orphan(true, abOctetChops)},
		{ID: "5.12", Desc: "Send unfragmented text message after continuation frame with FIN = false, where there is no message to continue.",
			Run: orphan(false, abOneChop)},
		{ID: "5.13", Desc: "As 5.12, frame-wise.", Run: orphan(false, abFrameChops)},
		{ID: "5.14", Desc: "As 5.12, octet-wise.", Run: orphan(false, abOctetChops)},
		{ID: "5.15", Desc: "Send text message fragmented into 2 fragments, then continuation frame with FIN = false where there is no message to continue, then unfragmented text message.",
			Run: func(t *testing.T, c *rawClient) {
				c.send(abOneChop, c.frame(false, 0, ws.OpText, f1), c.frame(true, 0, ws.OpContinuation, f2),
					c.frame(false, 0, ws.OpContinuation, []byte("fragment3")), c.frame(true, 0, ws.OpText, []byte("fragment4")))
				c.expectMessage(ws.OpText, []byte("fragment1fragment2"))
				c.expectClose(1002)
			}},
		{ID: "5.16", Desc: "Repeated 2x: continuation frame with FIN = false (no message to continue), then text message fragmented into 2 fragments.",
			Run: orphanTwice(false)},
		{ID: "5.17", Desc: "Repeated 2x: continuation frame with FIN = true (no message to continue), then text message fragmented into 2 fragments.",
			Run: orphanTwice(true)},
		{ID: "5.18", Desc: "Send text message fragmented into 2 fragments, with both frame opcodes set to text.",
			Run: func(t *testing.T, c *rawClient) {
				c.send(abOneChop, c.frame(false, 0, ws.OpText, f1), c.frame(true, 0, ws.OpText, f2))
				c.expectClose(1002)
			}},
		{ID: "5.19", Desc: "Text message in 5 fragments; a ping after the 2nd, a 1 s pause, 2 more fragments, another ping, the last fragment.",
			Run: pauseMidMessage(abOneChop)},
		{ID: "5.20", Desc: "As 5.19, frame-wise.", Run: pauseMidMessage(abFrameChops)},
	}
}
