//go:build linux

package httpd_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gracepoll/gracepoll/httpd"
)

// heapInUse returns the heap in use after a collection.
func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// peakHeap samples the heap in use every 10 ms until stop is closed and
// returns the largest figure seen. It collects garbage more often
// meanwhile, so that the figure is what is held, not what awaits the
// next collection.
func peakHeap(stop <-chan struct{}) <-chan uint64 {
	old := debug.SetGCPercent(10)
	res := make(chan uint64, 1)
	go func() {
		var peak uint64
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			var m runtime.MemStats
			runtime.ReadMemStats(&m)
			peak = max(peak, m.HeapInuse)
			select {
			case <-stop:
				debug.SetGCPercent(old)
				res <- peak
				return
			case <-tick.C:
			}
		}
	}()
	return res
}

// TestUploadDownloadBoundedMemory: a 1 GiB upload read by io.Copy into
// io.Discard, and a 1 GiB download written by io.Copy from a file, stream
// through with the heap growing by less than 8 MiB; the download is read
// slowly for its first part.
func TestUploadDownloadBoundedMemory(t *testing.T) {
	size := int64(1 << 30)
	if testing.Short() {
		size = 64 << 20
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /upload", func(w http.ResponseWriter, r *http.Request) {
		n, err := io.Copy(io.Discard, r.Body)
		fmt.Fprintf(w, "%d %v", n, err)
	})
	mux.HandleFunc("GET /download", func(w http.ResponseWriter, r *http.Request) {
		f := io.LimitReader(zeros{}, size)
		w.Header().Set("Content-Length", fmt.Sprint(size))
		io.Copy(w, f)
	})
	addr := serve(t, &httpd.Server{Handler: mux})
	base := heapInUse()
	stop := make(chan struct{})
	peak := peakHeap(stop)

	c := rawConn(t, addr)
	c.SetDeadline(time.Now().Add(2 * time.Minute))
	go func() {
		fmt.Fprintf(c, "POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n", size)
		io.Copy(c, io.LimitReader(zeros{}, size))
	}()
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	if want := fmt.Sprintf("%d <nil>", size); string(b) != want {
		t.Fatalf("upload answered %q, want %q", b, want)
	}

	fmt.Fprintf(c, "GET /download HTTP/1.1\r\nHost: x\r\n\r\n")
	resp, err = http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	// A slow reader first: 1 MiB at 10 MiB/s.
	slow := make([]byte, 64<<10)
	for range 16 {
		if _, err := io.ReadFull(resp.Body, slow); err != nil {
			t.Fatal(err)
		}
		time.Sleep(6 * time.Millisecond)
	}
	n, err := io.Copy(io.Discard, resp.Body)
	if err != nil || n+16*int64(len(slow)) != size {
		t.Fatalf("download read %d bytes (%v), want %d", n+16*int64(len(slow)), err, size)
	}
	close(stop)
	if grew := int64(<-peak) - int64(base); grew > 8<<20 {
		t.Errorf("the heap grew by %d KiB while streaming %d MiB each way, want < 8 MiB", grew>>10, size>>20)
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// TestConcurrentUploads: 200 concurrent 1 MiB uploads, each connection's
// body arriving in pieces, take far less memory than their sum.
func TestConcurrentUploads(t *testing.T) {
	const n, size = 200, 1 << 20
	release := make(chan struct{})
	var started atomic.Int32
	addr := serve(t, &httpd.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		started.Add(1)
		<-release // every upload in progress at once
		n, _ := io.Copy(io.Discard, r.Body)
		fmt.Fprint(w, n)
	})})
	base := heapInUse()
	stop := make(chan struct{})
	peak := peakHeap(stop)
	errs := make(chan error, n)
	body := make([]byte, size) // one for every client: the heap measured is the server's
	for range n {
		go func() {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(time.Minute))
			go func() {
				fmt.Fprintf(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n", size)
				c.Write(body)
			}()
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				errs <- err
				return
			}
			b, _ := io.ReadAll(resp.Body)
			if string(b) != fmt.Sprint(size) {
				err = fmt.Errorf("answered %q", b)
			}
			errs <- err
		}()
	}
	deadline := time.Now().Add(timeout)
	for started.Load() < n && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // the bodies fill what they can
	close(release)
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	if grew := int64(<-peak) - int64(base); grew > 64<<20 {
		t.Errorf("%d concurrent 1 MiB uploads grew the heap by %d MiB, want < 64 MiB", n, grew>>20)
	}
}

// TestPipelineFloodNoReading: a client that pipelines requests for 64 KiB
// responses and reads nothing costs the output bound, not its requests'
// worth; reading, it gets every response.
func TestPipelineFloodNoReading(t *testing.T) {
	big := bytes.Repeat([]byte("z"), 64<<10)
	addr := serve(t, &httpd.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write(big)
	})})
	c := rawConn(t, addr)
	c.(*net.TCPConn).SetReadBuffer(64 << 10)
	const n = 2000 // 128 MiB of responses
	req := []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	base := heapInUse()
	go func() {
		for range n {
			if _, err := c.Write(req); err != nil {
				return
			}
		}
	}()
	time.Sleep(time.Second)
	if grew := int64(heapInUse()) - int64(base); grew > 8<<20 {
		t.Errorf("a client reading nothing grew the heap by %d MiB", grew>>20)
	}
	br := bufio.NewReader(c)
	for i := range n {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("response %d: %v", i, err)
		}
		if m, _ := io.Copy(io.Discard, resp.Body); m != int64(len(big)) {
			t.Fatalf("response %d: %d bytes", i, m)
		}
	}
}

// TestSlowloris: 100 connections sending a head a byte every 50 ms are
// closed at ReadHeaderTimeout, while other clients are served.
func TestSlowloris(t *testing.T) {
	srv := &httpd.Server{Handler: http.HandlerFunc(hello), ReadHeaderTimeout: 300 * time.Millisecond}
	addr := serve(t, srv)
	head := "GET / HTTP/1.1\r\nHost: x\r\nX-Slow: " + strings.Repeat("a", 1000) + "\r\n\r\n"
	closed := make(chan time.Duration, 100)
	for range 100 {
		go func() {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				closed <- -1
				return
			}
			defer c.Close()
			start := time.Now()
			for i := 0; i < len(head); i++ {
				if _, err := c.Write([]byte{head[i]}); err != nil {
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
			closed <- time.Since(start)
		}()
	}
	for range 20 {
		resp, err := http.Get("http://" + addr + "/")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	for range 100 {
		select {
		case d := <-closed:
			if d < 0 || d > 3*time.Second {
				t.Fatalf("a slowloris connection lasted %v, ReadHeaderTimeout is 300ms", d)
			}
		case <-time.After(timeout):
			t.Fatalf("slowloris connections still open: %+v", srv.Transport().Stats())
		}
	}
}

// TestBodyStall: a body that declares 1 GB, sends 10 bytes and stalls
// fails the handler's read after IdleTimeout, and the connection closes.
func TestBodyStall(t *testing.T) {
	readErr := make(chan error, 1)
	addr := serve(t, &httpd.Server{IdleTimeout: 300 * time.Millisecond, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, err := io.Copy(io.Discard, r.Body)
		readErr <- err
	})})
	c := rawConn(t, addr)
	fmt.Fprintf(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000000\r\n\r\n0123456789")
	select {
	case err := <-readErr:
		if err == nil {
			t.Fatal("the stalled body read ended without an error")
		}
	case <-time.After(timeout):
		t.Fatal("the stalled body read never ended")
	}
	readAll(c) // closed, not left open
}

// TestHalfClose: a client that sends its request and half-closes gets
// the whole response, for an inline handler and for one on a goroutine.
func TestHalfClose(t *testing.T) {
	big := bytes.Repeat([]byte("h"), 4<<20)
	addr := serve(t, &httpd.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		time.Sleep(50 * time.Millisecond)
		w.Write(big)
	})})
	for _, body := range []int{0, 200 << 10} {
		c := rawConn(t, addr)
		fmt.Fprintf(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", body, make([]byte, body))
		c.(*net.TCPConn).CloseWrite()
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		if n, err := io.Copy(io.Discard, resp.Body); n != int64(len(big)) || err != nil {
			t.Fatalf("body %d: response of %d bytes (%v), want %d", body, n, err, len(big))
		}
	}
}

// TestPanic: a handler that panics before writing gets a 500, one that
// panics after writing has its connection closed; the server goes on.
func TestPanic(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("/early", func(w http.ResponseWriter, r *http.Request) { panic("early") })
	mux.HandleFunc("/late", func(w http.ResponseWriter, r *http.Request) {
		w.Write(bytes.Repeat([]byte("x"), 10000))
		w.(http.Flusher).Flush()
		panic("late")
	})
	addr := serve(t, &httpd.Server{Handler: mux})
	c := rawConn(t, addr)
	fmt.Fprintf(c, "GET /early HTTP/1.1\r\nHost: x\r\n\r\nGET /early HTTP/1.1\r\nHost: x\r\n\r\n")
	if got := readAll(c); !strings.HasPrefix(got, "HTTP/1.1 500 ") || strings.Count(got, "HTTP/1.1") != 1 {
		t.Errorf("early panic answered %q, want one 500 and the connection closed", got)
	}
	c = rawConn(t, addr)
	fmt.Fprintf(c, "GET /late HTTP/1.1\r\nHost: x\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(io.Discard, resp.Body); err == nil {
		t.Errorf("late panic: the body ended cleanly, want it cut short")
	}
	resp, err = http.Get("http://" + addr + "/nothing")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
}

// TestConnectionClose: after a request with "Connection: close" nothing
// more is answered; HTTP/1.0 gets keep-alive only when it asks.
func TestConnectionClose(t *testing.T) {
	addr := serve(t, &httpd.Server{Handler: http.HandlerFunc(hello)})
	c := rawConn(t, addr)
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n")
	if got := readAll(c); strings.Count(got, "HTTP/1.1 200") != 1 || !strings.Contains(got, "Connection: close") {
		t.Errorf("answered %q, want one response with Connection: close", got)
	}
	c = rawConn(t, addr)
	fmt.Fprintf(c, "GET / HTTP/1.0\r\n\r\n")
	if got := readAll(c); !strings.HasSuffix(got, "Hello, World!") || !strings.Contains(got, "Connection: close") {
		t.Errorf("HTTP/1.0 answered %q", got)
	}
	c = rawConn(t, addr)
	fmt.Fprintf(c, "GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\nGET / HTTP/1.0\r\n\r\n")
	got := readAll(c)
	if strings.Count(got, "Hello, World!") != 2 || !strings.Contains(got, "Connection: keep-alive") {
		t.Errorf("HTTP/1.0 keep-alive answered %q", got)
	}
}

// TestExpectContinue: the client waits for 100 Continue before sending
// the body; the server sends it when the handler reads, and not if the
// handler answers without reading.
func TestExpectContinue(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("/read", func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		fmt.Fprint(w, n)
	})
	mux.HandleFunc("/refuse", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusForbidden)
	})
	addr := serve(t, &httpd.Server{Handler: mux})
	c := rawConn(t, addr)
	fmt.Fprintf(c, "POST /read HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n")
	br := bufio.NewReader(c)
	line, _ := br.ReadString('\n')
	if line != "HTTP/1.1 100 Continue\r\n" {
		t.Fatalf("got %q before sending the body, want 100 Continue", line)
	}
	br.ReadString('\n')
	c.Write([]byte("hello"))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := io.ReadAll(resp.Body); string(b) != "5" {
		t.Fatalf("answered %q, want 5", b)
	}
	c = rawConn(t, addr)
	fmt.Fprintf(c, "POST /refuse HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n")
	if got := readAll(c); !strings.HasPrefix(got, "HTTP/1.1 403 ") || strings.Contains(got, "100 Continue") {
		t.Fatalf("answered %q, want 403 without 100 Continue, then close", got)
	}
	// Go's client sends Expect with a body too.
	req, _ := http.NewRequest("POST", "http://"+addr+"/read", strings.NewReader(strings.Repeat("a", 100000)))
	req.Header.Set("Expect", "100-continue")
	resp, err = (&http.Client{Transport: &http.Transport{ExpectContinueTimeout: 5 * time.Second}}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := io.ReadAll(resp.Body); string(b) != "100000" {
		t.Fatalf("answered %q", b)
	}
	resp.Body.Close()
}

// TestShutdown: Shutdown closes an idle connection at once, lets an
// inline and a streaming request in progress finish, and a pipelined
// request read before it is answered with Connection: close.
func TestShutdown(t *testing.T) {
	entered := make(chan struct{}, 4)
	srv := &httpd.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		entered <- struct{}{}
		time.Sleep(300 * time.Millisecond)
		io.WriteString(w, "done")
	})}
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	addr := l.Addr().String()
	idle := rawConn(t, addr)
	inline := rawConn(t, addr)
	fmt.Fprintf(inline, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	streaming := rawConn(t, addr)
	fmt.Fprintf(streaming, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n%s", make([]byte, 100000))
	<-entered
	<-entered
	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- srv.Shutdown(context.Background()) }()
	if got := readAll(idle); got != "" {
		t.Errorf("the idle connection got %q", got)
	}
	if d := time.Since(start); d > 200*time.Millisecond {
		t.Errorf("the idle connection closed after %v, want at once", d)
	}
	for name, c := range map[string]net.Conn{"inline": inline, "streaming": streaming} {
		if got := readAll(c); !strings.HasSuffix(got, "done") || !strings.HasPrefix(got, "HTTP/1.1 200") {
			t.Errorf("%s request answered %q", name, got)
		}
	}
	if err := <-done; err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		t.Errorf("Serve returned %v", err)
	}
}

// TestHijack: an upgrade request's handler hijacks the connection and
// echoes lines; a request without Upgrade cannot hijack.
func TestHijack(t *testing.T) {
	hijackErr := make(chan error, 1)
	srv := &httpd.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		nc, rw, err := w.(http.Hijacker).Hijack()
		if r.Header.Get("Upgrade") == "" {
			hijackErr <- err
			return
		}
		if err != nil {
			hijackErr <- err
			return
		}
		defer nc.Close()
		rw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n")
		rw.Flush()
		for {
			line, err := rw.ReadString('\n')
			if err != nil {
				return
			}
			rw.WriteString("echo " + line)
			rw.Flush()
		}
	})}
	addr := serve(t, srv)
	c := rawConn(t, addr)
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: x\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\nfirst\n")
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 101 {
		t.Fatalf("upgrade: %v %v", resp, err)
	}
	for _, want := range []string{"first", "second", "third"} {
		if want != "first" {
			fmt.Fprintf(c, "%s\n", want)
		}
		line, err := br.ReadString('\n')
		if err != nil || line != "echo "+want+"\n" {
			t.Fatalf("read %q (%v), want echo %s", line, err, want)
		}
	}
	resp, err = http.Get("http://" + addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if err := <-hijackErr; !errors.Is(err, httpd.ErrNotUpgrade) || !errors.Is(err, http.ErrNotSupported) {
		t.Errorf("Hijack without Upgrade returned %v, want ErrNotUpgrade", err)
	}
}

// TestBlockingHandler: while handlers block for a second on other
// connections, light requests are answered quickly (the shared set hands
// their events to other waiters, and starts more).
func TestBlockingHandler(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("/block", func(w http.ResponseWriter, r *http.Request) { time.Sleep(time.Second) })
	mux.HandleFunc("/light", hello)
	addr := serve(t, &httpd.Server{Handler: mux})
	for range 4 {
		go func() {
			resp, err := http.Get("http://" + addr + "/block")
			if err == nil {
				resp.Body.Close()
			}
		}()
	}
	time.Sleep(100 * time.Millisecond)
	start := time.Now()
	for range 10 {
		c := rawConn(t, addr)
		fmt.Fprintf(c, "GET /light HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
		if got := readAll(c); !strings.HasSuffix(got, "Hello, World!") {
			t.Fatalf("light request answered %q", got)
		}
	}
	if d := time.Since(start); d > 500*time.Millisecond {
		t.Errorf("10 light requests took %v while 4 handlers blocked", d)
	}
}

// TestContextCancelled: a streaming request's context is cancelled when
// its client goes away; every request's is when its handler returns.
func TestContextCancelled(t *testing.T) {
	gone := make(chan error, 1)
	var after atomic.Value
	mux := http.NewServeMux()
	mux.HandleFunc("/wait", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
			gone <- r.Context().Err()
		case <-time.After(timeout):
			gone <- errors.New("never cancelled")
		}
	})
	mux.HandleFunc("/keep", func(w http.ResponseWriter, r *http.Request) { after.Store(r.Context()) })
	addr := serve(t, &httpd.Server{Handler: mux})
	c := rawConn(t, addr)
	fmt.Fprintf(c, "POST /wait HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\nExpect: 100-continue\r\n\r\n")
	time.Sleep(50 * time.Millisecond)
	c.Close()
	if err := <-gone; !errors.Is(err, context.Canceled) {
		t.Errorf("after the client left: %v, want context.Canceled", err)
	}
	resp, err := http.Get("http://" + addr + "/keep")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if err := after.Load().(context.Context).Err(); !errors.Is(err, context.Canceled) {
		t.Errorf("after the handler returned: %v, want context.Canceled", err)
	}
}

// TestTrailersAndFlush: a flushed response is chunked and carries its
// declared trailers.
func TestTrailersAndFlush(t *testing.T) {
	addr := serve(t, &httpd.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Trailer", "X-Sum")
		for i := range 3 {
			fmt.Fprintf(w, "part %d\n", i)
			http.NewResponseController(w).Flush()
		}
		w.Header().Set("X-Sum", "3")
		w.Header().Set(http.TrailerPrefix+"X-Late", "yes")
	})})
	resp, err := http.Get("http://" + addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "part 0\npart 1\npart 2\n" || len(resp.TransferEncoding) != 1 {
		t.Fatalf("body %q, transfer encoding %v", b, resp.TransferEncoding)
	}
	if resp.Trailer.Get("X-Sum") != "3" || resp.Trailer.Get("X-Late") != "yes" {
		t.Errorf("trailers %v", resp.Trailer)
	}
}

// bigDownload streams 1 GiB with io.Copy, as from a file.
func bigDownload(w http.ResponseWriter, r *http.Request) {
	io.Copy(w, io.LimitReader(zeros{}, 1<<30))
}

// dialNoRead sends a GET for path with a 4 KiB receive buffer and reads
// nothing.
func dialNoRead(t *testing.T, addr, path string) net.Conn {
	t.Helper()
	c := rawConn(t, addr)
	c.(*net.TCPConn).SetReadBuffer(4 << 10)
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", path)
	return c
}

// TestStalledReaders: fifty clients that stop reading large responses
// (each handler waits for its client, holding a waiter) do not keep a
// light request from being answered at once.
func TestStalledReaders(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("/big", bigDownload)
	mux.HandleFunc("/light", hello)
	addr := serve(t, &httpd.Server{Handler: mux})
	for range 50 {
		dialNoRead(t, addr, "/big")
	}
	time.Sleep(200 * time.Millisecond)
	start := time.Now()
	c := rawConn(t, addr)
	fmt.Fprintf(c, "GET /light HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
	if got := readAll(c); !strings.HasSuffix(got, "Hello, World!") {
		t.Fatalf("light request answered %q", got)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("a light request took %v behind 50 stalled readers", d)
	}
}

// TestShutdownTimeout: when Shutdown's context ends, a handler still
// writing to a client that reads nothing is stopped, and Shutdown
// returns the context's error at once.
func TestShutdownTimeout(t *testing.T) {
	srv := &httpd.Server{Handler: http.HandlerFunc(bigDownload)}
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	go srv.Serve(l)
	dialNoRead(t, l.Addr().String(), "/")
	time.Sleep(200 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := srv.Shutdown(ctx)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Shutdown returned %v, want context.DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("Shutdown returned after %v, its context ended after 300ms", d)
	}
}

// TestHalfClosePipelined: requests pipelined behind an upload served on
// a goroutine, and behind a response larger than the output bound, are
// all answered after the client's FIN, and then the connection closes at
// once, not at the idle timeout.
func TestHalfClosePipelined(t *testing.T) {
	big := bytes.Repeat([]byte("b"), 8<<20)
	mux := http.NewServeMux()
	mux.HandleFunc("/upload", func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		time.Sleep(50 * time.Millisecond)
		fmt.Fprint(w, n)
	})
	mux.HandleFunc("/big", func(w http.ResponseWriter, r *http.Request) { w.Write(big) })
	mux.HandleFunc("/light", hello)
	addr := serve(t, &httpd.Server{Handler: mux, IdleTimeout: time.Minute})
	for _, first := range []string{
		fmt.Sprintf("POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", 200<<10, make([]byte, 200<<10)),
		"GET /big HTTP/1.1\r\nHost: x\r\n\r\n",
	} {
		c := rawConn(t, addr)
		start := time.Now()
		go func() {
			io.WriteString(c, first+"GET /light HTTP/1.1\r\nHost: x\r\n\r\nGET /light HTTP/1.1\r\nHost: x\r\n\r\n")
			c.(*net.TCPConn).CloseWrite()
		}()
		time.Sleep(20 * time.Millisecond) // the FIN arrives while the first is served
		br := bufio.NewReader(c)
		for i := range 3 {
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("response %d: %v", i, err)
			}
			io.Copy(io.Discard, resp.Body)
		}
		if rest, err := io.ReadAll(br); len(rest) != 0 || err != nil {
			t.Fatalf("after the responses: %q, %v; want EOF", rest, err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("the connection closed after %v", d)
		}
	}
}
