//go:build linux

package httpd_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gracepoll/gracepoll/httpd"
	"github.com/gracepoll/gracepoll/poller"
)

// TestServeShutdownRace: Serve followed at once by Shutdown, on another
// goroutine, 1,000 times: Serve always returns http.ErrServerClosed
// (before, about 1 round in 400 returned "conn: connection server is
// closed" or "poller: closed", and -race saw Shutdown read the listener's
// handle that Serve wrote).
func TestServeShutdownRace(t *testing.T) {
	rounds := 1000
	if testing.Short() {
		rounds = 200
	}
	for i := range rounds {
		srv := &httpd.Server{Handler: http.HandlerFunc(hello), ErrorLog: log.New(io.Discard, "", 0)}
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		served := make(chan error, 1)
		go func() { served <- srv.Serve(l) }()
		switch i % 4 {
		case 1:
			runtime.Gosched()
		case 2:
			time.Sleep(time.Duration(i%97) * time.Microsecond)
		case 3:
			for start := time.Now(); time.Since(start) < time.Duration(i%13)*time.Microsecond; {
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		err = srv.Shutdown(ctx)
		cancel()
		if err != nil {
			t.Fatalf("round %d: Shutdown: %v", i, err)
		}
		select {
		case err := <-served:
			if !errors.Is(err, http.ErrServerClosed) {
				t.Fatalf("round %d: Serve returned %v, want http.ErrServerClosed", i, err)
			}
		case <-time.After(timeout):
			t.Fatalf("round %d: Serve did not return after Shutdown", i)
		}
	}
}

// inFlightShutdown serves a handler that blocks on its first request,
// starts Shutdown while that request is in flight, dials the server once
// Shutdown has begun, then lets the request finish. It reports the dial's
// error and how long it took, and the in-flight response's head.
type inFlightShutdown struct {
	dialErr     error
	dialTook    time.Duration
	resp        *http.Response
	shutdownErr error
}

func runInFlightShutdown(t *testing.T, serve func(net.Listener) error, shutdown func(context.Context) error, handler *blockingHandler) inFlightShutdown {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	served := make(chan error, 1)
	go func() { served <- serve(l) }()
	c := rawConn(t, addr)
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	select {
	case <-handler.entered:
	case <-time.After(timeout):
		t.Fatal("the handler did not run")
	}
	done := make(chan error, 1)
	go func() { done <- shutdown(context.Background()) }()
	time.Sleep(20 * time.Millisecond) // Shutdown has begun, waiting for the request
	var r inFlightShutdown
	start := time.Now()
	nc, err := net.DialTimeout("tcp", addr, 3*time.Second)
	r.dialTook = time.Since(start)
	r.dialErr = err
	if err == nil {
		// Accepted into a backlog no one serves: see what becomes of it.
		nc.SetDeadline(time.Now().Add(3 * time.Second))
		fmt.Fprintf(nc, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		_, err := nc.Read(make([]byte, 1))
		r.dialTook = time.Since(start)
		r.dialErr = fmt.Errorf("dial succeeded, then the read returned %v", err)
		nc.Close()
	}
	close(handler.release)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("reading the in-flight response: %v", err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	r.resp = resp
	select {
	case r.shutdownErr = <-done:
	case <-time.After(timeout):
		t.Fatal("Shutdown did not return")
	}
	select {
	case err := <-served:
		if !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve returned %v, want http.ErrServerClosed", err)
		}
	case <-time.After(timeout):
		t.Fatal("Serve did not return after Shutdown")
	}
	return r
}

// blockingHandler answers its first request once release is closed.
type blockingHandler struct {
	once             sync.Once
	entered, release chan struct{}
}

func newBlockingHandler() *blockingHandler {
	return &blockingHandler{entered: make(chan struct{}), release: make(chan struct{})}
}

func (h *blockingHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.once.Do(func() {
		close(h.entered)
		<-h.release
	})
	io.WriteString(w, "done")
}

// bothServers runs check against net/http's server and httpd's.
func bothServers(t *testing.T, check func(t *testing.T, r inFlightShutdown)) {
	t.Run("net/http", func(t *testing.T) {
		h := newBlockingHandler()
		srv := &http.Server{Handler: h, ErrorLog: log.New(io.Discard, "", 0)}
		check(t, runInFlightShutdown(t, srv.Serve, srv.Shutdown, h))
	})
	for _, topo := range []poller.Topology{poller.Shared, poller.PerWaiter, poller.Stealing} {
		t.Run("httpd/"+topo.String(), func(t *testing.T) {
			h := newBlockingHandler()
			srv := &httpd.Server{Handler: h, ErrorLog: log.New(io.Discard, "", 0)}
			if topo != poller.Shared { // httpd's default
				srv.Options.Poller = poller.Options{Topology: topo, Waiters: 2}
			}
			check(t, runInFlightShutdown(t, srv.Serve, srv.Shutdown, h))
		})
	}
}

// TestShutdownRefusesNewConnections: a connection that arrives while
// Shutdown waits for a request in flight is refused at once, as net/http's
// Shutdown, which closes its listeners as it begins, refuses it (before,
// httpd's kernel backlog took it, and it was reset about 2 s later when the
// listener's socket was finally closed).
func TestShutdownRefusesNewConnections(t *testing.T) {
	bothServers(t, func(t *testing.T, r inFlightShutdown) {
		if !errors.Is(r.dialErr, syscall.ECONNREFUSED) {
			t.Errorf("a dial during Shutdown: %v, want ECONNREFUSED", r.dialErr)
		}
		t.Logf("the dial: %v after %v", r.dialErr, r.dialTook)
		if r.dialTook > 100*time.Millisecond {
			t.Errorf("a dial during Shutdown took %v, want an immediate refusal", r.dialTook)
		}
		if r.shutdownErr != nil {
			t.Errorf("Shutdown: %v", r.shutdownErr)
		}
	})
}

// TestShutdownInFlightConnectionClose: the response to a request whose
// handler was running when Shutdown began says "Connection: close", as
// net/http's does (before, httpd decided it when the request was read).
func TestShutdownInFlightConnectionClose(t *testing.T) {
	bothServers(t, func(t *testing.T, r inFlightShutdown) {
		if !r.resp.Close { // ReadResponse takes "Connection: close" out of Header
			t.Errorf("the in-flight response does not say Connection: close")
		}
	})
}

// TestConnStateHijackedTerminal: StateHijacked is terminal, as net/http's
// doc says: no StateClosed follows it, whether the handler closes the
// hijacked connection, the client does, or Shutdown does.
func TestConnStateHijackedTerminal(t *testing.T) {
	for _, closer := range []string{"handler", "client", "shutdown"} {
		t.Run(closer, func(t *testing.T) {
			var mu sync.Mutex
			var states []http.ConnState
			hijacked := make(chan net.Conn, 1)
			closed := make(chan struct{})
			srv := &httpd.Server{
				ErrorLog: log.New(io.Discard, "", 0),
				ConnState: func(_ net.Conn, s http.ConnState) {
					mu.Lock()
					states = append(states, s)
					mu.Unlock()
				},
				Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					nc, rw, err := w.(http.Hijacker).Hijack()
					if err != nil {
						t.Errorf("Hijack: %v", err)
						return
					}
					rw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\nConnection: Upgrade\r\n\r\nhi")
					rw.Flush()
					if closer == "handler" {
						nc.Close()
						return
					}
					hijacked <- nc
					go func() {
						io.Copy(io.Discard, nc) // until the client or Shutdown closes it
						nc.Close()
						close(closed)
					}()
				}),
			}
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			served := make(chan error, 1)
			go func() { served <- srv.Serve(l) }()
			c := rawConn(t, l.Addr().String())
			fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: x\r\nUpgrade: x\r\nConnection: Upgrade\r\n\r\n")
			br := bufio.NewReader(c)
			resp, err := http.ReadResponse(br, nil)
			if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
				t.Fatalf("upgrade: %v %v", resp, err)
			}
			switch closer {
			case "client":
				<-hijacked
				c.Close()
				<-closed
			case "shutdown":
				<-hijacked
			}
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			if closer == "handler" {
				io.ReadAll(br) // the server's close
			}
			// Let the server's OnClose run before Shutdown (it waits for it
			// anyway): the connection's end must not add StateClosed.
			time.Sleep(50 * time.Millisecond)
			if err := srv.Shutdown(ctx); err != nil {
				t.Errorf("Shutdown: %v", err)
			}
			if closer == "shutdown" {
				<-closed
			}
			if err := <-served; !errors.Is(err, http.ErrServerClosed) {
				t.Errorf("Serve returned %v", err)
			}
			mu.Lock()
			defer mu.Unlock()
			want := []http.ConnState{http.StateNew, http.StateActive, http.StateHijacked}
			if fmt.Sprint(states) != fmt.Sprint(want) {
				t.Errorf("ConnState saw %v, want %v", states, want)
			}
		})
	}
}
