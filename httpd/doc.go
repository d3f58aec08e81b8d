// Package httpd serves HTTP/1.1 and HTTP/2 with any net/http Handler on
// gracepoll's connections (package conn), without a goroutine per
// connection.
//
// Switching from net/http is a line of the program's main:
//
//	srv := &httpd.Server{Addr: ":8080", Handler: mux} // was &http.Server{...}
//	log.Fatal(srv.ListenAndServe())
//
// Handlers get the *http.Request and http.ResponseWriter they get from
// net/http: http.Flusher, http.Hijacker (see Hijack), and
// http.ResponseController's Flush, SetReadDeadline, SetWriteDeadline and
// EnableFullDuplex work; Expect: 100-continue, HEAD, trailers, the Date
// field, Content-Type sniffing, a Content-Length for a response of up to
// 2 KiB written before its handler returns, and chunked (or, to an
// HTTP/1.0 client, close-delimited) bodies beyond are as in net/http.
// So are the head's rules: it is the header as it was at WriteHeader
// (changes after it are not sent, trailers aside), a handler's
// Transfer-Encoding frames the body as there (chunked, or identity: ended
// by closing), a 1xx carries no Content-Length or Transfer-Encoding, and
// the first 512 bytes written are sniffed, for a HEAD too. Differences
// left on purpose:
//
//   - The status line says HTTP/1.1 to an HTTP/1.0 client (RFC 9112
//     section 2.3).
//   - A panic before any output gets a 500 where net/http closes; one
//     after a single write of more than 2 KiB has sent all of it, where
//     net/http sends only its first 2 KiB (its buffer): either way the
//     chunked body ends without its last chunk.
//   - httpd's own refusals carry a Date and a Content-Length.
//   - r.Context()'s http.ServerContextKey holds the *httpd.Server (there
//     is no *http.Server).
//   - A response goes out while its request's body is still coming
//     (always full duplex, as after
//     http.ResponseController.EnableFullDuplex), where net/http first
//     reads up to 256 KiB of the body its handler left: so a chunked body
//     left unread beyond that closes the connection after a response that
//     did not say "Connection: close", its size unknown when the head
//     went out.
//   - A Content-Length body of up to 64 KiB is awaited whole before its
//     handler starts, so that the handler runs inline (see below): its
//     first Read may return more than net/http's.
//   - With "Expect: 100-continue" and the body sent with the head anyway,
//     no 100 Continue is sent (RFC 9110 section 10.1.1 allows it), and the
//     connection is kept whether the handler reads the body or not: it
//     has arrived. net/http sends one at the first Read, and closes if
//     there was none.
//   - With "Expect: 100-continue", a body the handler did not read and
//     the client withheld is not waited for: the connection closes after
//     the response (which says "Connection: close", as net/http's).
//   - An http.MaxBytesReader over its limit leaves the connection open:
//     net/http closes it through an unexported interface.
//
// The package's differential tests (parity_*_test.go) serve the same
// handlers with both servers and compare the bytes each sends.
//
// # Where a handler runs
//
// A connection holds no goroutine between requests: its state is a few
// hundred bytes, and its input is read into its waiter's buffer. When a
// request's head and whole body (up to 64 KiB) have arrived, the handler
// runs on the waiter that read them, inline: no goroutine is started or
// woken for it, and the responses to the requests of one read (pipelined)
// go out in one write. Its body is read from the connection's input
// without waiting. A response larger than the output bound (conn's
// HighWater) is written out by the handler's own goroutine as the client
// takes it (conn.Conn.Flush), so io.Copy of a large file streams in
// bounded memory.
//
// The server's poller uses one shared epoll set by default (poller.Shared):
// a handler that blocks (a database call, a lock, a sleep) delays its own
// connection only: neither other connections' requests nor their release
// when they close (their descriptors are closed as they go, while the
// handler still blocks; see the poller package on detached waiters). The
// others' events go to the other waiters, and when
// all are blocked for poller.Options.Overrun another waiter starts, up to
// Options.Poller.MaxWaiters (here poller.MaxWaiters, 1,024, by default).
// With that many handlers blocked at once, further requests wait until one
// returns: that is the bound on the goroutines (waiters) handlers may hold.
// A handler writing a large response to a client that stops reading is
// one of them, until the client reads again or IdleTimeout (WriteTimeout,
// if set) passes.
//
// A request whose body has not all arrived when its head has (an upload
// larger than 64 KiB, a chunked body still coming, Expect: 100-continue),
// and one that asks to upgrade or is a CONNECT, runs on a goroutine of
// its own instead, at most Server.MaxStreams at once (beyond that, 503
// and the connection closed). The waiter feeds its body to it through a
// 64 KiB pipe; when the pipe is full the connection stops reading and TCP
// pushes back on the client, so an upload of any size costs at most the
// pipe and one read buffer. The connection reads no further request until
// that response is complete, and r.Context() is cancelled when the client
// goes away meanwhile.
//
// # Guarantees
//
//   - Requests are parsed strictly (RFC 9112): a head that a front proxy
//     could frame differently (Content-Length with Transfer-Encoding,
//     differing Content-Lengths, a Transfer-Encoding other than a final
//     chunked, obs-fold, whitespace before a colon, a bare CR or LF, NUL in
//     a field, a malformed request line or chunk) is refused with 400 and
//     the connection closed. Bare LF is refused, though RFC 9112 lets a
//     server accept it. Limits: Server.MaxHeaderBytes (431), 8 KiB of
//     request-target (414), 100 header fields (431), Server.MaxBodyBytes
//     (413).
//   - Responses go out in request order, under conn's flow control: a
//     client that pipelines thousands of requests and reads nothing costs
//     the output bound (HighWater) plus one response, and is read again
//     once it reads.
//   - Time is bounded: ReadHeaderTimeout from a head's first byte,
//     IdleTimeout between requests and for a request that makes no
//     progress (a body or a response that stalls), ReadTimeout and
//     WriteTimeout as in net/http.
//   - A handler that panics gets a 500 if it wrote nothing; the
//     connection closes either way, and the server goes on.
//   - Shutdown stops accepting, closes idle connections, lets the requests
//     in progress (and those already read) finish and flush, then closes;
//     its context bounds it.
//
// # Limits
//
// A handler running inline sees its client leave only when it returns:
// the connection's events wait for it. Its r.Context() is cancelled by
// Close, by Shutdown's end, and when it returns.
//
// # HTTP/2
//
// HTTP/2 (RFC 9113, with HPACK, RFC 7541, of this module's own) is served
// as net/http serves it: over TLS when the client offers "h2" in ALPN
// (TLS 1.2 or later with an AEAD cipher, RFC 9113 section 9.2, unless
// HTTP2.PermitProhibitedCipherSuites), and on plain connections that
// start with the HTTP/2 preface (h2c with prior knowledge) when
// Server.Protocols has SetUnencryptedHTTP2(true). The "Upgrade: h2c"
// request of RFC 7540, which RFC 9113 removed, is served as HTTP/1.1.
// Protocols without HTTP/2 turns it off.
//
// Handlers get r.ProtoMajor 2, the header as net/http maps HTTP/2's
// fields (pseudo-header fields in Method, URL, Host and RequestURI,
// cookies joined), a body streamed under flow control, trailers both
// ways, 1xx responses, Expect: 100-continue, http.Flusher, and
// http.ResponseController's Flush, deadlines and EnableFullDuplex;
// http.Pusher answers http.ErrNotSupported and there is no Hijack, as
// with net/http. r.Context() is cancelled when the client resets the
// stream or the connection ends. TestParityH2 sends the differential
// suite's requests through net/http's client over HTTP/2 to both
// servers and finds them alike. Differences left on purpose: fields
// HTTP/2 forbids in a response (Connection, Keep-Alive,
// Proxy-Connection, Transfer-Encoding, Upgrade) are dropped, where
// net/http drops only Connection; a "Connection: close" in a response
// sends GOAWAY, and the connection closes once its streams are done.
//
// The connection's frames are read and dispatched on its waiter, as
// HTTP/1.1's requests are; each request's handler runs on a goroutine of
// its own, started once the frames of the read that opened it are
// dispatched (a stream reset in the same read never runs), and gone when
// the handler returns. A handler that blocks delays neither the other
// streams of its connection nor other connections. An idle HTTP/2
// connection holds no goroutine and no buffer: its HPACK tables and a few
// hundred bytes of state, beyond conn's. The responses of handlers
// finishing together are written in one system call.
//
// Bounds, each tested with a hostile client: at most
// HTTP2.MaxConcurrentStreams streams (250) per connection, counted until
// their handlers return, so that neither the client's resets (rapid
// reset, CVE-2023-44487) nor those it provokes (MadeYouReset,
// CVE-2025-8671) let more handlers run; a request's fields are limited to
// MaxHeaderBytes as they are decoded (431 beyond), and its field block,
// CONTINUATION frames included, to twice that (CVE-2023-45288: the
// connection closes); request bodies buffer at most the receive windows
// (1 MiB per connection by default); output waits for the client's windows
// and, beyond conn's HighWater, for the socket, so a client that reads
// nothing costs the output bound and is reset after IdleTimeout without
// progress; a stream whose window stays shut for IdleTimeout is reset;
// frames that serve no request (SETTINGS, PING, empty DATA, WINDOW_UPDATE
// of a few bytes, refused or reset streams) are limited to about 1,000
// per 10 s (GOAWAY ENHANCE_YOUR_CALM beyond; CVE-2019-9512, 9515, 9518),
// and a window opened a byte at a time gets a few small DATA frames,
// not one per byte (CVE-2019-9511, 9517).
//
// Shutdown sends GOAWAY naming the last stream read; the streams in
// progress finish, reading the client's window updates and bodies as
// before, and the connection closes.
//
// # Hijack
//
// Hijack works on a request that asks to upgrade (an Upgrade field other
// than h2c) or is a CONNECT, which runs on a goroutine of its own; on
// others it returns ErrNotUpgrade, as a blocking read of the connection
// from a handler running inline would wait for itself. The net.Conn it
// returns reads what the client sends after the request (the waiter
// feeds it, under the same 64 KiB pipe), writes through the connection's
// queue (waiting while it is above HighWater) and closes gracefully; the
// bufio.ReadWriter wraps it. Shutdown closes it gracefully as it begins
// (what was written is flushed first), as its protocol is not the
// server's to finish; reads then fail.
package httpd
