//go:build linux

package httpd_test

import (
	"bufio"
	"fmt"
	"log"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gracepoll/gracepoll/conn"
	"github.com/gracepoll/gracepoll/httpd"
	"github.com/gracepoll/gracepoll/internal/testkit"
	"github.com/gracepoll/gracepoll/poller"
)

// blockedRelease serves srv with two waiters on epoll sets of their own,
// the listener's and another, and a handler that blocks on the other until
// the test ends; then a second connection, on the listener's waiter, makes
// a request and closes. Its release waits for the blocked waiter to pass a
// quiescent point, longer than the poller's ReleaseWatchdog (50 ms), so the
// watchdog reports it.
func blockedRelease(t *testing.T, srv *httpd.Server) {
	t.Helper()
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	mux := http.NewServeMux()
	mux.HandleFunc("GET /block", func(w http.ResponseWriter, r *http.Request) {
		once.Do(func() { close(entered) })
		<-release
	})
	mux.HandleFunc("GET /plaintext", hello)
	srv.Handler = mux
	srv.Options.Poller = poller.Options{Topology: poller.PerWaiter, Waiters: 2, ReleaseWatchdog: 50 * time.Millisecond}
	addr := serve(t, srv)
	t.Cleanup(func() { close(release) }) // before serve's Shutdown, which waits for the handler
	// The listener is the first registration, on waiter 0; this
	// connection goes to the least loaded waiter, 1, and blocks it.
	blocked := rawConn(t, addr)
	fmt.Fprintf(blocked, "GET /block HTTP/1.1\r\nHost: x\r\n\r\n")
	testkit.Wait(t, entered, timeout, "the blocking handler")
	// Waiter 0 now has one registration as waiter 1 does: this one goes
	// to waiter 0, which serves it.
	c := rawConn(t, addr)
	fmt.Fprintf(c, "GET /plaintext HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	c.Close()
}

// TestErrorLogTransportReports checks that the poller's reports reach
// Server.ErrorLog: the watchdog's line for a release held by a waiter
// blocked in a handler.
func TestErrorLogTransportReports(t *testing.T) {
	var buf testkit.SyncBuffer
	srv := &httpd.Server{ErrorLog: log.New(&buf, "httpd: ", 0)}
	blockedRelease(t, srv)
	testkit.Eventually(t, timeout, "the watchdog's report in ErrorLog", func() bool {
		return strings.Contains(buf.String(), "pending too long")
	})
	time.Sleep(200 * time.Millisecond) // more watchdog ticks
	out := buf.String()
	t.Logf("ErrorLog:\n%s", out)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 1 {
		t.Fatalf("ErrorLog has %d lines, want the watchdog's one", len(lines))
	}
	for _, want := range []string{"httpd: WARN poller: releases pending too long: ", "never releasing early",
		" held_by=waiter waiter=1 stuck=", " releases=1 oldest="} {
		if !strings.Contains(lines[0], want) {
			t.Errorf("ErrorLog line %q, want %q in it", lines[0], want)
		}
	}
}

// TestErrorLogKeepsOwnLogger checks that a Logger set in the server's
// Options keeps the transport's reports, as documented on ErrorLog.
func TestErrorLogKeepsOwnLogger(t *testing.T) {
	var errorLog, own testkit.SyncBuffer
	srv := &httpd.Server{ErrorLog: log.New(&errorLog, "", 0)}
	srv.Options = conn.Options{Logger: slog.New(slog.NewTextHandler(&own, nil))}
	blockedRelease(t, srv)
	testkit.Eventually(t, timeout, "the watchdog's report in Options.Logger", func() bool {
		return strings.Contains(own.String(), "pending too long")
	})
	if s := errorLog.String(); s != "" {
		t.Errorf("ErrorLog got %q, want nothing: Options.Logger is set", s)
	}
}
