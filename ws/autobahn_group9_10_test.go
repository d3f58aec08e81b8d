package ws_test

import (
	"fmt"
	"testing"

	"github.com/gracepoll/gracepoll/ws"
)

// Group 9: limits and performance, at Autobahn's sizes (up to 16 MiB in
// one frame; the server's MaxMessageSize is 16 MiB). Group 10: automatic
// fragmentation.

// abRoundTrips is how many messages 9.7.x and 9.8.x send: Autobahn's
// 1000, or 200 under the race detector or -short.
func abRoundTrips() int {
	if autobahnRace || testing.Short() {
		return 200
	}
	return 1000
}

// abFragments sends payload as one message in frames of n octets.
func abFragments(c *rawClient, op ws.Opcode, payload []byte, n int) {
	var frames [][]byte
	for i := 0; i == 0 || i < len(payload); i += n {
		frames = append(frames, c.frame(i+n >= len(payload), 0, op, payload[i:min(i+n, len(payload))]))
		op = ws.OpContinuation
	}
	c.send(abOneChop, frames...)
}

func abGroup9() []abCase {
	const k, m = 1 << 10, 1 << 20
	var cs []abCase
	ops := []ws.Opcode{ws.OpText, ws.OpBinary}
	for g, op := range ops { // 9.1 text, 9.2 binary
		for i, n := range []int{64 * k, 256 * k, m, 4 * m, 8 * m, 16 * m} {
			cs = append(cs, abCase{
				ID:   fmt.Sprintf("9.%d.%d", g+1, i+1),
				Desc: fmt.Sprintf("Send %v message of %d octets in one frame.", op, n),
				Run:  abEchoCase(op, abPayload(op, n), 0),
			})
		}
	}
	for g, op := range ops { // 9.3 text, 9.4 binary
		for i, n := range []int{64, 256, k, 4 * k, 16 * k, 64 * k, 256 * k, m, 4 * m} {
			cs = append(cs, abCase{
				ID:   fmt.Sprintf("9.%d.%d", g+3, i+1),
				Desc: fmt.Sprintf("Send fragmented %v message of 4 MiB in fragments of %d octets.", op, n),
				Run: func(t *testing.T, c *rawClient) {
					payload := abPayload(op, 4*m)
					abFragments(c, op, payload, n)
					c.expectMessage(op, payload)
					c.closeNormal()
				},
			})
		}
	}
	for g, op := range ops { // 9.5 text, 9.6 binary
		for i, n := range []int{64, 128, 256, 512, k, 2 * k} {
			cs = append(cs, abCase{
				ID:   fmt.Sprintf("9.%d.%d", g+5, i+1),
				Desc: fmt.Sprintf("Send %v message of 1 MiB in one frame, written in chops of %d octets.", op, n),
				Run:  abEchoCase(op, abPayload(op, m), n),
			})
		}
	}
	for g, op := range ops { // 9.7 text, 9.8 binary
		for i, n := range []int{0, 16, 64, 256, k, 4 * k} {
			cs = append(cs, abCase{
				ID:   fmt.Sprintf("9.%d.%d", g+7, i+1),
				Desc: fmt.Sprintf("Send %v messages of %d octets, each after the echo of the one before (Autobahn: 1000).", op, n),
				Run: func(t *testing.T, c *rawClient) {
					payload := abPayload(op, n)
					for range abRoundTrips() {
						c.sendFrame(true, 0, op, payload)
						c.expectMessage(op, payload)
					}
					c.closeNormal()
				},
			})
		}
	}
	return cs
}

func abGroup10() []abCase {
	return []abCase{{
		ID:   "10.1.1",
		Desc: "Send text message of 65536 octets auto-fragmented into frames of 1300 octets.",
		Run: func(t *testing.T, c *rawClient) {
			payload := abPayload(ws.OpText, 65536)
			abFragments(c, ws.OpText, payload, 1300)
			c.expectMessage(ws.OpText, payload)
			c.closeNormal()
		},
	}}
}
