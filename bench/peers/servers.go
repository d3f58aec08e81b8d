//go:build linux

package peers

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"sync"
	"time"

	"github.com/cloudwego/netpoll"
	"github.com/panjf2000/gnet/v2"
	"github.com/panjf2000/gnet/v2/pkg/logging"
	"golang.org/x/sys/unix"
)

// NetEcho is the plain Go server: one goroutine per connection on the
// runtime's own netpoller.
type NetEcho struct {
	ln        net.Listener
	mu        sync.Mutex
	conns     map[net.Conn]struct{}
	wg        sync.WaitGroup
	serveConn func(net.Conn) // the protocol; nil: echo
}

// NewNetEcho starts the net server on 127.0.0.1, on a free port.
func NewNetEcho() (*NetEcho, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &NetEcho{ln: ln, conns: map[net.Conn]struct{}{}}
	s.wg.Add(1)
	go s.accept()
	return s, nil
}

// Addr returns the server's address.
func (s *NetEcho) Addr() string { return s.ln.Addr().String() }

// Close stops accepting, closes every connection and waits for their
// goroutines.
func (s *NetEcho) Close() error {
	err := s.ln.Close()
	s.mu.Lock()
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	return err
}

func (s *NetEcho) accept() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		s.conns[c] = struct{}{}
		s.mu.Unlock()
		s.wg.Add(1)
		go s.serve(c)
	}
}

func (s *NetEcho) serve(c net.Conn) {
	defer s.wg.Done()
	defer func() {
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		c.Close()
	}()
	if s.serveConn != nil {
		s.serveConn(c)
		return
	}
	echo(c, make([]byte, 64<<10))
}

// echo writes back what c reads, read by read through buf, until an error.
func echo(c net.Conn, buf []byte) {
	for {
		n, err := c.Read(buf)
		if err != nil {
			return
		}
		if _, err := c.Write(buf[:n]); err != nil {
			return
		}
	}
}

// gnetServer runs a gnet v2 engine with one event loop per core
// (WithMulticore), its usual production setting, on 127.0.0.1 on a free
// port. The handler embeds it for OnBoot.
type gnetServer struct {
	gnet.BuiltinEventEngine
	eng    gnet.Engine
	addr   string
	booted chan struct{}
	done   chan error
}

// start runs h (which embeds g) and waits until it listens. opts come
// after the usual ones and may override them (gnet.WithNumEventLoop
// overrides WithMulticore's one loop per core).
func (g *gnetServer) start(h gnet.EventHandler, opts ...gnet.Option) error {
	g.booted, g.done = make(chan struct{}), make(chan error, 1)
	opts = append([]gnet.Option{
		gnet.WithMulticore(true),
		gnet.WithTCPNoDelay(gnet.TCPNoDelay),
		gnet.WithLogger(errorsOnly{}),
	}, opts...)
	go func() { g.done <- gnet.Run(h, "tcp://127.0.0.1:0", opts...) }()
	select {
	case <-g.booted:
	case err := <-g.done:
		return fmt.Errorf("gnet: %w", err)
	case <-time.After(10 * time.Second):
		return errors.New("gnet: did not boot in 10s")
	}
	// The port is known only once bound: read it from a duplicate of the
	// listening socket.
	fd, err := g.eng.Dup()
	if err != nil {
		g.Close()
		return err
	}
	defer unix.Close(fd)
	sa, err := unix.Getsockname(fd)
	if err != nil {
		g.Close()
		return err
	}
	g.addr = fmt.Sprintf("127.0.0.1:%d", sa.(*unix.SockaddrInet4).Port)
	return nil
}

// OnBoot records the engine.
func (g *gnetServer) OnBoot(eng gnet.Engine) gnet.Action {
	g.eng = eng
	close(g.booted)
	return gnet.None
}

// Addr returns the server's address.
func (g *gnetServer) Addr() string { return g.addr }

// Close stops the engine.
func (g *gnetServer) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := g.eng.Stop(ctx)
	<-g.done
	return err
}

// errorsOnly is a gnet logger that keeps errors and drops the rest, so that
// gnet's start-up banner does not interleave with benchmark lines.
type errorsOnly struct{}

func (errorsOnly) Debugf(string, ...any)          {}
func (errorsOnly) Infof(string, ...any)           {}
func (errorsOnly) Warnf(string, ...any)           {}
func (errorsOnly) Errorf(format string, a ...any) { log.Printf("gnet: "+format, a...) }
func (errorsOnly) Fatalf(format string, a ...any) { log.Fatalf("gnet: "+format, a...) }

var _ logging.Logger = errorsOnly{}

// GnetEcho is an echo server on gnet v2.
type GnetEcho struct{ gnetServer }

// NewGnetEcho starts the gnet server on 127.0.0.1, on a free port.
func NewGnetEcho() (*GnetEcho, error) {
	s := &GnetEcho{}
	if err := s.start(s); err != nil {
		return nil, err
	}
	return s, nil
}

// OnTraffic echoes what arrived.
func (s *GnetEcho) OnTraffic(c gnet.Conn) gnet.Action {
	buf, _ := c.Next(-1)
	if _, err := c.Write(buf); err != nil {
		return gnet.Close
	}
	return gnet.None
}

// NetpollEcho is an echo server on cloudwego/netpoll with its default
// configuration (one poller per 20 cores, handlers on its goroutine pool).
type NetpollEcho struct {
	loop netpoll.EventLoop
	ln   netpoll.Listener
	done chan error
}

// NewNetpollEcho starts the netpoll server on 127.0.0.1, on a free port.
func NewNetpollEcho() (*NetpollEcho, error) {
	ln, err := netpoll.CreateListener("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	loop, err := netpoll.NewEventLoop(func(_ context.Context, c netpoll.Connection) error {
		r, w := c.Reader(), c.Writer()
		defer r.Release()
		buf, err := r.Next(r.Len())
		if err != nil {
			return err
		}
		if _, err := w.WriteBinary(buf); err != nil {
			return err
		}
		return w.Flush()
	})
	if err != nil {
		ln.Close()
		return nil, err
	}
	s := &NetpollEcho{loop: loop, ln: ln, done: make(chan error, 1)}
	go func() { s.done <- loop.Serve(ln) }()
	return s, nil
}

// Addr returns the server's address.
func (s *NetpollEcho) Addr() string { return s.ln.Addr().String() }

// Close shuts the event loop down.
func (s *NetpollEcho) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := s.loop.Shutdown(ctx)
	<-s.done
	return err
}
