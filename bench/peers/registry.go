//go:build linux

// Package peers compares gracepoll's servers with their peers, each server
// in a process of its own pinned to one CPU (GOMAXPROCS=1) and the client
// in another pinned to the other CPU, so that the client's cost does not
// decide the ranking: echo servers (examples/echo's, on package conn and on
// the raw poller; Go's net package with a goroutine per connection; gnet v2;
// cloudwego/netpoll) and key-value servers (examples/kv's command code on
// package conn, on net and on gnet) driven by redis-benchmark; and the
// same over TLS: the conn echo and kv servers with conn.Options.TLS (Go's
// crypto/tls itself), net with crypto/tls, and nbio with its fork of
// crypto/tls (gnet and netpoll have no TLS), by throughput and CPU per
// message, handshakes per second and CPU per handshake, and memory per
// idle connection; and, under skewed load (a few requests blocking in the
// handler, BenchmarkSkew), the light requests' latency on conn and on the
// raw poller with one shared epoll set, with a set per waiter and with
// stealing (a set per waiter whose registrations any waiter may run),
// gnet, netpoll and net; and HTTP/1.1 servers (gracepoll's httpd, a raw
// HTTP/1.1 server on package conn, fasthttp, nbio's nbhttp, net/http,
// hertz; HTTPHandler) under wrk, an open-loop client, idle keep-alive
// connections and TLS, and the release of closed connections while a
// handler blocks (BenchmarkBlockedRelease); and WebSocket servers
// (gracepoll's ws on httpd, gorilla/websocket, coder/websocket, nbio's
// websocket, lxzan/gws) by CPU per echoed message, broadcast to 10,000
// connections and memory per idle connection, under a raw-frame client of
// this package; and HTTP/2 servers (httpd, net/http and nghttpd, h2c and
// over TLS, with fasthttp's HTTP/1.1 for scale) under h2load, an
// open-loop client, one-gigabyte streams and idle connections. The TLS
// servers serve a self-signed certificate made in-process (NewCert).
//
// The servers are started by cmd/serve; the load is examples/echo/loadgen,
// the generator examples/echo uses, which checks every reply. It is a
// separate module so that gracepoll's own go.mod does not depend on its
// peers. Run it with bench/run.sh, or
//
//	cd bench/peers && go test -run '^$' -bench . .
package peers

import (
	"github.com/gracepoll/gracepoll/conn"
	"github.com/gracepoll/gracepoll/examples/echo/connecho"
	"github.com/gracepoll/gracepoll/examples/echo/echoserver"
	"github.com/gracepoll/gracepoll/poller"
)

// Server is a server listening on 127.0.0.1.
type Server interface {
	Addr() string
	Close() error
}

// PollerServer is a server built on gracepoll's poller, whose statistics
// (release latency) the launcher reports.
type PollerServer interface {
	Server
	Poller() *poller.Poller
}

// Named is one server of the comparison, by the name the benchmarks, the
// report and cmd/serve use for it.
type Named struct {
	Name string
	// Kind is "echo" or "kv" (the Redis protocol), or "tls-echo" or
	// "tls-kv", the same over TLS, or "skew" (BenchmarkSkew's frames,
	// some of them slow; see SkewFrameSize), or "http" and "tls-http"
	// (HTTPHandler's routes), or "http-variant" (the same routes, a
	// configuration only some benchmarks run), or "ws" (WebSocket:
	// WSPathEcho and WSPathBroadcast), or "h2" and "tls-h2" (HTTP/2,
	// h2c and over TLS: H2Handler's routes), or "tls-http-variant"
	// (HTTPHandler's routes over TLS, a server only the HTTP/2
	// benchmarks run).
	Kind string
	// Start starts a plaintext server; StartTLS, set instead for the TLS
	// kinds, starts a server that serves the certificate.
	Start    func() (Server, error)
	StartTLS func(Cert) (Server, error)
}

// Servers are the servers compared, each with its default or usual
// production configuration on the cores it is given (GOMAXPROCS).
var Servers = []Named{
	// The examples/echo server on the connection layer (its default),
	// then its raw-poller server on one shared set, on stealing and on
	// default options (per-waiter sets): the gap is what the layer costs.
	{"gracepoll-conn", "echo", func() (Server, error) { return connecho.New(conn.Options{}) }, nil},
	{"gracepoll-shared", "echo", func() (Server, error) { return echoserver.New(poller.Options{Topology: poller.Shared}, 0) }, nil},
	{"gracepoll-stealing", "echo", func() (Server, error) { return echoserver.New(poller.Options{Topology: poller.Stealing}, 0) }, nil},
	{"gracepoll-per-waiter", "echo", func() (Server, error) { return echoserver.New(poller.Options{}, 0) }, nil},
	{"net", "echo", func() (Server, error) { return NewNetEcho() }, nil},
	{"gnet", "echo", func() (Server, error) { return NewGnetEcho() }, nil},
	{"netpoll", "echo", func() (Server, error) { return NewNetpollEcho() }, nil},
	// examples/kv: its conn.Handler, and the same parser and command code
	// (examples/kv/resp, examples/kv/store) served by net and by gnet.
	{"kv-conn", "kv", func() (Server, error) { return NewKVConn() }, nil},
	{"kv-net", "kv", func() (Server, error) { return NewKVNet() }, nil},
	{"kv-gnet", "kv", func() (Server, error) { return NewKVGnet() }, nil},
	// TLS: the conn echo server with Options.TLS (crypto/tls itself),
	// the net echo server behind crypto/tls's listener, and nbio with
	// its fork of crypto/tls; gnet and cloudwego/netpoll have no TLS.
	{"conn-tls", "tls-echo", nil, NewConnTLSEcho},
	{"net-tls", "tls-echo", nil, NewNetTLSEcho},
	{"nbio-tls", "tls-echo", nil, NewNbioTLSEcho},
	// examples/kv over TLS, and the same command code on net + crypto/tls.
	{"kv-conn-tls", "tls-kv", nil, NewKVConnTLS},
	{"kv-net-tls", "tls-kv", nil, NewKVNetTLS},
	// The skew servers (BenchmarkSkew): frames echoed after the work
	// each asks for, on conn and on the raw poller with SkewWaiters
	// waiters on one shared set, on a set each and stealing (a set each,
	// any waiter running any registration), gnet with SkewWaiters loops,
	// netpoll, net.
	{"skew-conn-shared", "skew", func() (Server, error) { return NewSkewConn(poller.Shared) }, nil},
	{"skew-conn-per-waiter", "skew", func() (Server, error) { return NewSkewConn(poller.PerWaiter) }, nil},
	{"skew-conn-stealing", "skew", func() (Server, error) { return NewSkewConn(poller.Stealing) }, nil},
	{"skew-poller-shared", "skew", func() (Server, error) { return NewSkewPoller(poller.Shared) }, nil},
	{"skew-poller-per-waiter", "skew", func() (Server, error) { return NewSkewPoller(poller.PerWaiter) }, nil},
	{"skew-poller-stealing", "skew", func() (Server, error) { return NewSkewPoller(poller.Stealing) }, nil},
	{"skew-gnet", "skew", func() (Server, error) { return NewSkewGnet() }, nil},
	{"skew-netpoll", "skew", func() (Server, error) { return NewSkewNetpoll() }, nil},
	{"skew-net", "skew", func() (Server, error) { return NewSkewNet() }, nil},
	// The HTTP/1.1 servers (BenchmarkHTTP and the others of http_test.go):
	// the same routes (HTTPHandler) on net/http and nbio's nbhttp, and
	// their equivalents in fasthttp's and hertz's own handler interfaces.
	{"net/http", "http", NewNetHTTP, nil},
	{"fasthttp", "http", NewFastHTTP, nil},
	{"nbio", "http", NewNbioHTTP, nil},
	{"hertz", "http", NewHertzHTTP, nil},
	// gracepoll's httpd with its defaults, serving HTTPHandler.
	{"httpd", "http", NewHTTPD, nil},
	// The same routes answered by a minimal HTTP/1.1 parser straight on
	// package conn, with httpd's poller configuration (ConnHTTP): the
	// floor under httpd.
	{"conn-http", "http", NewConnHTTP, nil},
	// ConnHTTP on poller.Stealing, for BenchmarkBlockedRelease only.
	{"conn-http-stealing", "http-variant", NewConnHTTPStealing, nil},
	// HTTP over TLS: httpd with TLSConfig (crypto/tls inside package
	// conn) and net/http behind crypto/tls's listener.
	{"httpd-tls", "tls-http", nil, NewHTTPDTLS},
	{"net/http-tls", "tls-http", nil, NewNetHTTPTLS},
	// HTTP/2 (BenchmarkH2 and the others of h2bench_test.go): httpd and
	// net/http serving H2Handler, with h2c by prior knowledge next to
	// HTTP/1.1 (Protocols), and over TLS with h2 negotiated by ALPN;
	// fasthttp over TLS, HTTP/1.1, the reference row of the TLS cells
	// (nghttpd, the C reference, is no Go server: the benchmarks start
	// it themselves).
	{"httpd-h2c", "h2", NewHTTPDH2C, nil},
	{"net/http-h2c", "h2", NewNetHTTPH2C, nil},
	{"httpd-h2", "tls-h2", nil, NewHTTPDH2},
	{"net/http-h2", "tls-h2", nil, NewNetHTTPH2},
	{"fasthttp-tls", "tls-http-variant", nil, NewFastHTTPTLS},
	// WebSocket (BenchmarkWSEcho and the others of wsbench_test.go): the
	// same routes (WSPathEcho, WSPathBroadcast) on gracepoll's ws on
	// httpd, gorilla/websocket and coder/websocket on net/http, nbio's
	// websocket on nbhttp and lxzan/gws on net/http.
	{"ws-gracepoll", "ws", NewWSGracepoll, nil},
	{"ws-gorilla", "ws", NewWSGorilla, nil},
	{"ws-coder", "ws", NewWSCoder, nil},
	{"ws-nbio", "ws", NewWSNbio, nil},
	{"ws-gws", "ws", NewWSGws, nil},
}

// Lookup returns the server called name.
func Lookup(name string) (Named, bool) {
	for _, s := range Servers {
		if s.Name == name {
			return s, true
		}
	}
	return Named{}, false
}

// Names returns the servers' names, in order.
func Names() []string {
	var ns []string
	for _, s := range Servers {
		ns = append(ns, s.Name)
	}
	return ns
}

// OfKind returns the servers of one kind, in order.
func OfKind(kind string) []Named {
	var ns []Named
	for _, s := range Servers {
		if s.Kind == kind {
			ns = append(ns, s)
		}
	}
	return ns
}
