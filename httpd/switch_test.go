//go:build linux

package httpd_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gracepoll/gracepoll/conn"
	"github.com/gracepoll/gracepoll/httpd"
)

// lineEcho is a Protocol that answers each line with "echo " and the
// line, and records what happened to it.
type lineEcho struct {
	mu       sync.Mutex
	events   []string
	closed   chan struct{}
	shutdown atomic.Bool
}

func newLineEcho() *lineEcho {
	return &lineEcho{closed: make(chan struct{})}
}

func (p *lineEcho) record(s string) {
	p.mu.Lock()
	p.events = append(p.events, s)
	p.mu.Unlock()
}

func (p *lineEcho) OnData(c *conn.Conn) {
	for {
		b, _ := c.Peek(c.Buffered())
		i := strings.IndexByte(string(b), '\n')
		if i < 0 {
			return
		}
		c.Write(append([]byte("echo "), b[:i+1]...))
		c.Discard(i + 1)
	}
}

func (p *lineEcho) OnReadEOF(c *conn.Conn) {
	p.record("eof")
	c.Write([]byte("bye\n"))
	c.Close()
}

func (p *lineEcho) OnShutdown(c *conn.Conn) {
	p.shutdown.Store(true)
	c.Write([]byte("going away\n"))
	c.Close()
}

func (p *lineEcho) OnClose(c *conn.Conn, r conn.Reason, err error) {
	p.record("close " + r.String())
	close(p.closed)
}

// TestSwitch: a Protocol gets the bytes that followed the upgrade request
// (sent with it, before the 101), then the rest, and its OnReadEOF and
// OnClose run.
func TestSwitch(t *testing.T) {
	var p *lineEcho
	switched := make(chan error, 1)
	srv := &httpd.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p = newLineEcho()
		w.Header().Set("Upgrade", "lines")
		w.Header().Set("Connection", "Upgrade")
		c, err := httpd.Switch(w, p)
		if err == nil {
			// Written from the handler's goroutine after Switch: after the
			// 101, before anything the Protocol writes.
			c.Write([]byte("hello\n"))
		}
		switched <- err
	})}
	addr := serve(t, srv)
	c := rawConn(t, addr)
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: x\r\nUpgrade: lines\r\nConnection: Upgrade\r\n\r\nfirst\n")
	if err := <-switched; err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 101 || resp.Header.Get("Upgrade") != "lines" {
		t.Fatalf("upgrade: %v %v", resp, err)
	}
	for _, want := range []string{"hello", "echo first", "echo second"} {
		if want == "echo second" {
			fmt.Fprintf(c, "second\n")
		}
		line, err := br.ReadString('\n')
		if err != nil || line != want+"\n" {
			t.Fatalf("read %q (%v), want %q", line, err, want)
		}
	}
	c.(interface{ CloseWrite() error }).CloseWrite()
	if rest, _ := io.ReadAll(br); string(rest) != "bye\n" {
		t.Errorf("after our FIN, read %q, want the Protocol's bye", rest)
	}
	<-p.closed
	p.mu.Lock()
	defer p.mu.Unlock()
	if got := strings.Join(p.events, ","); got != "eof,close local-close" {
		t.Errorf("events %q", got)
	}
}

// TestSwitchShutdown: Shutdown calls OnShutdown, whose goodbye reaches the
// client before the connection closes, and returns once it has.
func TestSwitchShutdown(t *testing.T) {
	p := newLineEcho()
	srv := &httpd.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		httpd.Switch(w, p)
	})}
	addr := serve(t, srv)
	c := rawConn(t, addr)
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: x\r\nUpgrade: lines\r\nConnection: Upgrade\r\n\r\nping\n")
	br := bufio.NewReader(c)
	if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != 101 {
		t.Fatalf("upgrade: %v %v", resp, err)
	}
	if line, _ := br.ReadString('\n'); line != "echo ping\n" {
		t.Fatalf("read %q", line)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- srv.Shutdown(ctx) }()
	if line, _ := br.ReadString('\n'); line != "going away\n" {
		t.Fatalf("read %q, want the OnShutdown goodbye", line)
	}
	c.Close()
	if err := <-done; err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	if !p.shutdown.Load() {
		t.Error("OnShutdown did not run")
	}
	<-p.closed
}

// TestSwitchRefused: Switch refuses what it cannot switch, with errors a
// caller can test.
func TestSwitchRefused(t *testing.T) {
	got := make(chan error, 1)
	srv := &httpd.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/written" {
			w.WriteHeader(200)
			w.(http.Flusher).Flush()
		}
		_, err := httpd.Switch(w, newLineEcho())
		got <- err
	})}
	addr := serve(t, srv)
	for _, tc := range []struct {
		req  string
		want error
	}{
		{"GET / HTTP/1.1\r\nHost: x\r\n\r\n", httpd.ErrNotUpgrade},
		{"CONNECT x:1 HTTP/1.1\r\nHost: x:1\r\n\r\n", httpd.ErrNotUpgrade},
		{"GET /written HTTP/1.1\r\nHost: x\r\nUpgrade: lines\r\nConnection: Upgrade\r\n\r\n", http.ErrHijacked},
	} {
		c := rawConn(t, addr)
		io.WriteString(c, tc.req)
		select {
		case err := <-got:
			if !errors.Is(err, tc.want) {
				t.Errorf("%q: Switch returned %v, want %v", tc.req, err, tc.want)
			}
		case <-time.After(timeout):
			t.Fatalf("%q: handler not run", tc.req)
		}
		c.Close()
	}
	// Not httpd's ResponseWriter at all.
	if _, err := httpd.Switch(fakeWriter{}, newLineEcho()); !errors.Is(err, httpd.ErrNotUpgrade) {
		t.Errorf("Switch of a foreign ResponseWriter: %v, want ErrNotUpgrade", err)
	}
}

type fakeWriter struct{ http.ResponseWriter }
