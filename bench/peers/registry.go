//go:build linux

// Package peers compares gracepoll's servers with their peers, each server
// in a process of its own pinned to one CPU (GOMAXPROCS=1) and the client
// in another pinned to the other CPU, so that the client's cost does not
// decide the ranking: echo servers (examples/echo's, on package conn and on
// the raw poller; Go's net package with a goroutine per connection; gnet v2;
// cloudwego/netpoll) and key-value servers (examples/kv's command code on
// package conn, on net and on gnet) driven by redis-benchmark.
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
	Name  string
	Kind  string // "echo" or "kv" (the Redis protocol)
	Start func() (Server, error)
}

// Servers are the servers compared, each with its default or usual
// production configuration on the cores it is given (GOMAXPROCS).
var Servers = []Named{
	// The examples/echo server on the connection layer (its default),
	// then its raw-poller server on one shared set and on default
	// options (per-waiter sets): the gap is what the layer costs.
	{"gracepoll-conn", "echo", func() (Server, error) { return connecho.New(conn.Options{}) }},
	{"gracepoll-shared", "echo", func() (Server, error) { return echoserver.New(poller.Options{Topology: poller.Shared}, 0) }},
	{"gracepoll-per-waiter", "echo", func() (Server, error) { return echoserver.New(poller.Options{}, 0) }},
	{"net", "echo", func() (Server, error) { return NewNetEcho() }},
	{"gnet", "echo", func() (Server, error) { return NewGnetEcho() }},
	{"netpoll", "echo", func() (Server, error) { return NewNetpollEcho() }},
	// examples/kv: its conn.Handler, and the same parser and command code
	// (examples/kv/resp, examples/kv/store) served by net and by gnet.
	{"kv-conn", "kv", func() (Server, error) { return NewKVConn() }},
	{"kv-net", "kv", func() (Server, error) { return NewKVNet() }},
	{"kv-gnet", "kv", func() (Server, error) { return NewKVGnet() }},
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
