// Package ws serves WebSocket (RFC 6455) connections, with
// permessage-deflate (RFC 7692), on an httpd.Server: event-driven, as
// package conn is, so that an idle connection holds no goroutine and
// tens of thousands of mostly idle connections cost little memory.
//
// It needs an httpd.Server: net/http's http.Server cannot hand a
// connection over, so there Upgrade, and an Upgrader mounted as a
// handler, answer the client 500 and fail with ErrNotHttpd. Serve with
// httpd (ListenAndServe, Server.Serve, their TLS forms) where a
// gorilla/websocket program used net/http.
//
// An echo server:
//
//	type echo struct{ ws.BaseHandler }
//
//	func (echo) OnMessage(c *ws.Conn, op ws.Opcode, data []byte) {
//		c.WriteMessage(op, data)
//	}
//
//	func main() {
//		http.Handle("/echo", &ws.Upgrader{Handler: echo{}})
//		log.Fatal(httpd.ListenAndServe("127.0.0.1:8081", nil))
//	}
//
// Guarantees:
//
//   - Messages arrive whole: OnMessage runs once per message, its
//     fragments reassembled, inflated if compressed, under
//     Upgrader.MaxMessageSize (1009 beyond it, before and after
//     inflating, so a compression bomb stops at the limit). A message that
//     arrives whole in one read is delivered from the read buffer without
//     a copy.
//   - The protocol is enforced strictly: unmasked client frames, reserved
//     bits and opcodes, fragmented or oversized control frames, and
//     fragments out of order fail the connection with 1002; text that is
//     not UTF-8 fails it with 1007 at the first invalid byte, also across
//     fragments and within a frame still arriving; close codes that may
//     not be sent fail it with 1002. Pings are answered with pongs.
//   - Writes never block and are bounded. WriteMessage, WritePrepared,
//     Ping and Close may be called from any goroutine; each frame is
//     queued whole on conn's queue. A peer that leaves more than conn's
//     Options.HighWater unread stops being read (so it cannot make the
//     server buffer its input either); a write that would take its queue
//     past Options.MaxQueued resets it (ErrSlowReader), so a client that
//     never reads costs at most MaxQueued however much is broadcast.
//     OnMessage handlers that reply are flow-controlled as conn's are:
//     frames are parsed only while the queue is below HighWater.
//   - No write reaches a reused descriptor, and nothing runs for a
//     connection after OnClose (conn's guarantees).
//   - The close handshake completes: a peer's close frame is answered
//     (its code echoed) and the connection closed; Close waits for the
//     peer's answer at most Upgrader.CloseTimeout. httpd.Server.Shutdown
//     sends 1001 to every connection. After the handshake the server
//     closes TCP first, as RFC 6455 section 7.1.1 asks, and OnClose runs
//     when the client's FIN answers, or after conn's Options.FlushTimeout
//     for a client that keeps its socket open.
//
// # Conformance
//
// The Autobahn|Testsuite's server cases of groups 1-7, 9, 10, 12 and 13
// (framing, pings, reserved bits and opcodes, fragmentation, UTF-8, close
// handling, limits, permessage-deflate) run as this package's Go tests,
// 517 cases, each asserting the strict outcome; all pass.
// docs/websocket-conformance.md in the repository has the table by group
// and how the cases differ from Autobahn's.
//
// # Broadcast
//
// NewPreparedMessage encodes a message once; WritePrepared queues the
// same bytes on each connection, and for connections that agreed
// compression the message is compressed once too.
//
// # Memory
//
// An idle connection holds its conn.Conn, the HTTP layer's state and a
// Conn, about a kilobyte: no goroutine, no buffer. A message in progress
// holds a pooled buffer until it is delivered, at most
// Upgrader.MaxMessageSize however slowly it arrives: that limit times the
// connections is the bound on messages in progress, so keep it to what
// the application needs. With Upgrader.ContextTakeover each compressing
// connection keeps the last 32 KiB it received. Compressors and
// decompressors are pooled, never kept per connection. Output is bounded
// by conn's Options.MaxQueued per connection.
package ws
