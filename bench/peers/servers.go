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
	ln    net.Listener
	mu    sync.Mutex
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
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
	buf := make([]byte, 64<<10)
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

// GnetEcho is an echo server on gnet v2 with one event loop per core
// (WithMulticore), its usual production setting.
type GnetEcho struct {
	gnet.BuiltinEventEngine
	eng    gnet.Engine
	addr   string
	booted chan struct{}
	done   chan error
}

// NewGnetEcho starts the gnet server on 127.0.0.1, on a free port.
func NewGnetEcho() (*GnetEcho, error) {
	s := &GnetEcho{booted: make(chan struct{}), done: make(chan error, 1)}
	go func() {
		s.done <- gnet.Run(s, "tcp://127.0.0.1:0",
			gnet.WithMulticore(true),
			gnet.WithTCPNoDelay(gnet.TCPNoDelay),
			gnet.WithLogger(errorsOnly{}))
	}()
	select {
	case <-s.booted:
	case err := <-s.done:
		return nil, fmt.Errorf("gnet: %w", err)
	case <-time.After(10 * time.Second):
		return nil, errors.New("gnet: did not boot in 10s")
	}
	// The port is known only once bound: read it from a duplicate of the
	// listening socket.
	fd, err := s.eng.Dup()
	if err != nil {
		s.Close()
		return nil, err
	}
	defer unix.Close(fd)
	sa, err := unix.Getsockname(fd)
	if err != nil {
		s.Close()
		return nil, err
	}
	s.addr = fmt.Sprintf("127.0.0.1:%d", sa.(*unix.SockaddrInet4).Port)
	return s, nil
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

// OnBoot records the engine.
func (s *GnetEcho) OnBoot(eng gnet.Engine) gnet.Action {
	s.eng = eng
	close(s.booted)
	return gnet.None
}

// OnTraffic echoes what arrived.
func (s *GnetEcho) OnTraffic(c gnet.Conn) gnet.Action {
	buf, _ := c.Next(-1)
	if _, err := c.Write(buf); err != nil {
		return gnet.Close
	}
	return gnet.None
}

// Addr returns the server's address.
func (s *GnetEcho) Addr() string { return s.addr }

// Close stops the engine.
func (s *GnetEcho) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := s.eng.Stop(ctx)
	<-s.done
	return err
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
