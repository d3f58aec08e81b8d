package httpd

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/gracepoll/gracepoll/conn"
	"github.com/gracepoll/gracepoll/internal/h1"
	"github.com/gracepoll/gracepoll/poller"
)

// Defaults of Server's fields, used where a field is zero.
const (
	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultIdleTimeout       = 60 * time.Second
	DefaultMaxHeaderBytes    = 64 << 10
	DefaultMaxStreams        = 1024
)

// Sentinel errors. Test with errors.Is.
var (
	// ErrInvalid reports Server fields out of range.
	ErrInvalid = errors.New("httpd: invalid configuration")
	// ErrNotUpgrade reports a Hijack of a request that did not ask to
	// upgrade or CONNECT: its handler runs on a waiter, where a blocking
	// read of the hijacked connection would wait for itself (see Hijack
	// in the package doc). It matches http.ErrNotSupported.
	ErrNotUpgrade = fmt.Errorf("httpd: Hijack of a request that is not an upgrade or CONNECT: %w", http.ErrNotSupported)
)

// Server serves HTTP/1.1 and HTTP/2 with an http.Handler. Its fields mirror
// http.Server's; set them before the first Serve. The zero value serves
// http.DefaultServeMux with safe defaults.
type Server struct {
	// Addr is the TCP address ListenAndServe listens on, ":http" (or
	// ":https") if empty.
	Addr string
	// Handler serves requests; nil means http.DefaultServeMux.
	Handler http.Handler
	// TLSConfig is the TLS configuration of ServeTLS and
	// ListenAndServeTLS (cloned; NextProtos gets "h2" then "http/1.1",
	// as Protocols allow, ahead of the others). Set with a certificate,
	// Serve serves TLS too.
	TLSConfig *tls.Config

	// Protocols is the set of protocols served, as http.Server's: nil
	// means HTTP/1 and, over TLS, HTTP/2 negotiated by ALPN.
	// SetUnencryptedHTTP2(true) serves HTTP/2 with prior knowledge (h2c:
	// a connection starting with the HTTP/2 preface) on plain
	// connections too; SetHTTP2(false) turns HTTP/2 off. An "Upgrade:
	// h2c" request is served as HTTP/1.1 (RFC 9113 removed the upgrade).
	Protocols *http.Protocols
	// HTTP2 configures HTTP/2 as http.Server's field does; nil or zero
	// fields take net/http's defaults: MaxConcurrentStreams
	// DefaultMaxConcurrentStreams, MaxReceiveBufferPerConnection and
	// MaxReceiveBufferPerStream DefaultMaxReceiveBuffer (both raised to
	// 64 KiB if set lower), HPACK tables of 4 KiB, frames read of up to
	// MaxReadFrameSize (16 KiB: RFC 9113's default). A value out of range
	// is ErrInvalid (net/http takes the default instead).
	// SendPingTimeout, PingTimeout, WriteByteTimeout and CountError are
	// not used: IdleTimeout bounds a connection that makes no progress.
	HTTP2 *http.HTTP2Config

	// ReadHeaderTimeout bounds reading a request head, from its first
	// byte; 0 means ReadTimeout if set, else DefaultReadHeaderTimeout.
	// A client sending a head a byte at a time (slowloris) is closed at
	// this bound whatever its rate.
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds reading a whole request, body included, from
	// the first byte of its head: a body read after it fails with
	// os.ErrDeadlineExceeded. 0: no bound on the body (its reads are still
	// bounded by IdleTimeout while no byte arrives).
	ReadTimeout time.Duration
	// WriteTimeout bounds each response from the end of its request's
	// head, as in net/http: output the handler writes after it is not
	// sent, and the connection closes after what came before; a
	// connection whose response is still queued then is reset.
	// http.ResponseController's SetWriteDeadline moves it. 0: none (a
	// client that stops reading is still bounded by IdleTimeout, which
	// counts no progress).
	WriteTimeout time.Duration
	// IdleTimeout closes a keep-alive connection that has waited this
	// long for its next request, and a connection that made no progress
	// (no input taken, no output sent) for this long in a request;
	// 0 means ReadTimeout if set, else DefaultIdleTimeout.
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds a request head (431 beyond), and a chunked
	// body's trailer section; 0 means DefaultMaxHeaderBytes.
	MaxHeaderBytes int
	// MaxBodyBytes bounds a request body (413 beyond, and the connection
	// closed); 0: no bound, the body streams in bounded memory.
	MaxBodyBytes int64
	// MaxStreams bounds the requests served on goroutines of their own
	// at once (bodies that have not all arrived, upgrades; see the
	// package doc); beyond it a request is answered 503 and its
	// connection closed. 0 means DefaultMaxStreams.
	MaxStreams int

	// ErrorLog receives errors such as handler panics; nil means the log
	// package's standard logger. When set, it also receives the
	// transport's reports, which conn and the poller log through
	// log/slog: running out of file descriptors, misuse, and the poller's
	// release watchdog, which reports connections' releases held longer
	// than Options.Poller.ReleaseWatchdog (10 s) and what holds them, such
	// as a handler blocked on its waiter. One line each: level, message,
	// key=value attributes ("WARN poller: releases pending too long: ...
	// waiter=0 stuck=11.7s releases=200 ..."). Options.Logger, if set,
	// takes conn's reports instead, and the poller's unless
	// Options.Poller.Logger is set too, which then takes the poller's.
	// With ErrorLog nil they go to slog.Default(), which writes to the
	// log package's standard logger unless the program set another
	// default.
	ErrorLog *log.Logger
	// ConnState, if not nil, is called as a connection changes state, as
	// http.Server's is (StateNew, StateActive, StateIdle, StateHijacked,
	// StateClosed; StateHijacked is terminal: no StateClosed follows it).
	// It runs on the connection's waiter, or on the goroutine serving its
	// request: keep it short.
	ConnState func(net.Conn, http.ConnState)
	// DisableGeneralOptionsHandler, if true, passes "OPTIONS *" requests
	// to Handler; otherwise they are answered 200 with an empty body, as
	// http.Server's are.
	DisableGeneralOptionsHandler bool
	// BaseContext returns the base context of the requests of a listener;
	// nil means context.Background().
	BaseContext func(net.Listener) context.Context

	// Options tunes the transport: the poller (Options.Poller; its
	// Topology defaults here to poller.Shared, so that a handler that
	// blocks delays only its own connection), flow control (HighWater),
	// buffers. Its timeouts and TLS are set from the fields above.
	Options conn.Options

	mu     sync.Mutex
	cs     *conn.Server
	h      *handler
	closed bool
	done   chan struct{} // closed once the transport has closed
}

// ListenAndServe listens on the TCP address s.Addr and serves it, as
// http.Server's does: it returns http.ErrServerClosed after Shutdown or
// Close.
func (s *Server) ListenAndServe() error {
	addr := s.Addr
	if addr == "" {
		addr = ":http"
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	return s.Serve(l)
}

// ListenAndServeTLS is ListenAndServe with TLS, using the certificate
// and key in certFile and keyFile (PEM), or TLSConfig's when both are
// empty.
func (s *Server) ListenAndServeTLS(certFile, keyFile string) error {
	addr := s.Addr
	if addr == "" {
		addr = ":https"
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	return s.ServeTLS(l, certFile, keyFile)
}

// ServeTLS is Serve with TLS, using the certificate and key in certFile
// and keyFile (PEM), or TLSConfig's when both are empty.
func (s *Server) ServeTLS(l net.Listener, certFile, keyFile string) error {
	config := &tls.Config{}
	if s.TLSConfig != nil {
		config = s.TLSConfig.Clone()
	}
	if certFile != "" || keyFile != "" {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			l.Close()
			return err
		}
		config.Certificates = append(config.Certificates, cert)
	}
	s.mu.Lock()
	s.TLSConfig = config
	s.mu.Unlock()
	return s.Serve(l)
}

// Serve serves l, a *net.TCPListener or *net.UnixListener, until Shutdown
// or Close, and returns http.ErrServerClosed then (or the error that
// stopped it). l is closed when Serve returns; the server serves a
// duplicate of its socket meanwhile. Several Serve calls may share one
// Server.
func (s *Server) Serve(l net.Listener) error {
	defer l.Close()
	cs, err := s.start(l)
	if err != nil {
		return err
	}
	if err := cs.Serve(l); err != nil {
		if s.isClosed() {
			return http.ErrServerClosed // Shutdown or Close began before l joined
		}
		return err
	}
	l.Close()
	<-s.done
	return http.ErrServerClosed
}

func (s *Server) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// start makes the transport on the first Serve.
func (s *Server) start(l net.Listener) (*conn.Server, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, http.ErrServerClosed
	}
	if s.cs != nil {
		return s.cs, nil
	}
	h, opts, err := s.configure(l)
	if err != nil {
		return nil, err
	}
	cs, err := conn.NewServer(h, opts)
	if err != nil {
		return nil, err
	}
	s.cs, s.h = cs, h
	s.done = make(chan struct{})
	go func() {
		<-cs.Done()
		h.cancel()
		close(s.done)
	}()
	return cs, nil
}

// configure validates the fields and fills in their defaults.
func (s *Server) configure(l net.Listener) (*handler, conn.Options, error) {
	bad := func(what string, v any) error { return fmt.Errorf("%w: %s %v", ErrInvalid, what, v) }
	switch {
	case s.ReadHeaderTimeout < 0:
		return nil, conn.Options{}, bad("ReadHeaderTimeout", s.ReadHeaderTimeout)
	case s.ReadTimeout < 0:
		return nil, conn.Options{}, bad("ReadTimeout", s.ReadTimeout)
	case s.WriteTimeout < 0:
		return nil, conn.Options{}, bad("WriteTimeout", s.WriteTimeout)
	case s.IdleTimeout < 0:
		return nil, conn.Options{}, bad("IdleTimeout", s.IdleTimeout)
	case s.MaxHeaderBytes < 0:
		return nil, conn.Options{}, bad("MaxHeaderBytes", s.MaxHeaderBytes)
	case s.MaxBodyBytes < 0:
		return nil, conn.Options{}, bad("MaxBodyBytes", s.MaxBodyBytes)
	case s.MaxStreams < 0:
		return nil, conn.Options{}, bad("MaxStreams", s.MaxStreams)
	}
	h := &handler{srv: s, handler: s.Handler}
	if h.handler == nil {
		h.handler = http.DefaultServeMux
	}
	h.headerTimeout = firstOf(s.ReadHeaderTimeout, s.ReadTimeout, DefaultReadHeaderTimeout)
	h.idleTimeout = firstOf(s.IdleTimeout, s.ReadTimeout, DefaultIdleTimeout)
	h.limits = h1.Limits{MaxHeadBytes: s.MaxHeaderBytes}
	if h.limits.MaxHeadBytes == 0 {
		h.limits.MaxHeadBytes = DefaultMaxHeaderBytes
	}
	h.streams = make(chan struct{}, cmpOr(s.MaxStreams, DefaultMaxStreams))
	h.http1 = s.Protocols == nil || s.Protocols.HTTP1()
	if err := h.h2.configure(s); err != nil {
		return nil, conn.Options{}, err
	}
	base := context.Background()
	if s.BaseContext != nil {
		if base = s.BaseContext(l); base == nil {
			return nil, conn.Options{}, bad("BaseContext returned", nil)
		}
	}
	h.ctx, h.cancel = context.WithCancel(base)

	opts := s.Options
	if s.ErrorLog != nil && opts.Logger == nil {
		// conn passes it on to the poller unless Poller.Logger is set.
		opts.Logger = slog.New(newErrorLogHandler(s.ErrorLog))
	}
	if opts.Poller.Topology == poller.PerWaiter && opts.Poller.MaxWaiters == 0 && opts.Poller.Waiters == 0 {
		opts.Poller.Topology = poller.Shared
		// A handler writing a large response to a client that reads
		// slowly, or not at all, holds its waiter until the client
		// reads or IdleTimeout passes: as many may wait as net/http
		// would have goroutines for them, up to the poller's bound.
		opts.Poller.MaxWaiters = poller.MaxWaiters
	}
	opts.IdleTimeout = h.idleTimeout
	opts.ReadTimeout, opts.WriteTimeout = 0, 0
	if s.TLSConfig != nil {
		config := s.TLSConfig.Clone()
		var protos []string
		if h.h2.tls {
			protos = append(protos, "h2")
		}
		if h.http1 {
			protos = append(protos, "http/1.1")
		}
		for _, p := range config.NextProtos {
			if p != "h2" && p != "http/1.1" {
				protos = append(protos, p)
			}
		}
		config.NextProtos = protos
		opts.TLS = config
		if opts.NotTLS == nil {
			opts.NotTLS = plainHTTPReply
		}
	}
	return h, opts, nil
}

// plainHTTPReply is a TLS server's conn.Options.NotTLS: a client that
// sent plaintext HTTP gets net/http's answer, decided by the same first
// five bytes (net/http's tlsRecordHeaderLooksLikeHTTP); others none.
func plainHTTPReply(header [5]byte) []byte {
	switch string(header[:]) {
	case "GET /", "HEAD ", "POST ", "PUT /", "OPTIO":
		return plainHTTP
	}
	return nil
}

// plainHTTP is net/http's answer to plaintext HTTP on a TLS port.
var plainHTTP = []byte("HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n")

func firstOf(ds ...time.Duration) time.Duration {
	for _, d := range ds {
		if d > 0 {
			return d
		}
	}
	return 0
}

func cmpOr(n, def int) int {
	if n > 0 {
		return n
	}
	return def
}

// Shutdown shuts the server down gracefully, as http.Server's does: it
// closes the listeners at once (a connection arriving then is refused),
// closes idle keep-alive connections at once, lets the requests in
// progress finish and their responses flush (a response whose head is
// written once Shutdown has begun, to a request in flight included, says
// "Connection: close"), then closes every connection. ctx bounds the
// wait: when it ends, what is left is reset, every request context is
// cancelled, and Shutdown returns ctx's error. Serve returns
// http.ErrServerClosed.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	cs, h := s.cs, s.h
	s.closed = true
	s.mu.Unlock()
	if cs == nil {
		return nil
	}
	// When ctx ends, conn resets what is left; the requests' contexts
	// end with it, so that handlers waiting on them return.
	stop := context.AfterFunc(ctx, h.cancel)
	h.switched.shutdown()
	_, _, err := cs.Shutdown(ctx)
	if !stop() && err == nil {
		// The requests were cancelled, and ended before conn saw the
		// context's end: not a graceful shutdown either.
		err = ctx.Err()
	}
	return err
}

// Close closes the server at once: listeners stop, every connection is
// reset and every request context cancelled. Serve returns
// http.ErrServerClosed.
func (s *Server) Close() error {
	s.mu.Lock()
	cs := s.cs
	s.closed = true
	s.mu.Unlock()
	if cs == nil {
		return nil
	}
	if s.h != nil {
		s.h.cancel()
	}
	return cs.Close()
}

// Transport returns the conn.Server the server runs on, for its
// statistics (Stats, Poller().Stats()); nil before the first Serve.
func (s *Server) Transport() *conn.Server {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cs
}

func (s *Server) logf(format string, args ...any) {
	if s.ErrorLog != nil {
		s.ErrorLog.Printf(format, args...)
		return
	}
	log.Printf(format, args...)
}

// ListenAndServe serves handler on the TCP address addr with a Server's
// defaults, as http.ListenAndServe does.
func ListenAndServe(addr string, handler http.Handler) error {
	return (&Server{Addr: addr, Handler: handler}).ListenAndServe()
}
