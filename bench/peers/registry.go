//go:build linux

package peers

import (
	"github.com/gracepoll/gracepoll/conn"
	"github.com/gracepoll/gracepoll/examples/echo/connecho"
	"github.com/gracepoll/gracepoll/examples/echo/echoserver"
	"github.com/gracepoll/gracepoll/poller"
)

// Named is one echo server of the comparison, by the name the benchmarks,
// the report and cmd/echoserve use for it.
type Named struct {
	Name  string
	Start func() (Server, error)
}

// Servers are the echo servers compared, each with its default or usual
// production configuration on the cores it is given (GOMAXPROCS).
var Servers = []Named{
	// The examples/echo server on the connection layer (its default),
	// then its raw-poller server on one shared set and on default
	// options (per-waiter sets): the gap is what the layer costs.
	{"gracepoll-conn", func() (Server, error) { return connecho.New(conn.Options{}) }},
	{"gracepoll-shared", func() (Server, error) { return echoserver.New(poller.Options{Topology: poller.Shared}, 0) }},
	{"gracepoll-per-waiter", func() (Server, error) { return echoserver.New(poller.Options{}, 0) }},
	{"net", func() (Server, error) { return NewNetEcho() }},
	{"gnet", func() (Server, error) { return NewGnetEcho() }},
	{"netpoll", func() (Server, error) { return NewNetpollEcho() }},
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
