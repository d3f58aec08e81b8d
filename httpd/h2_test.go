//go:build linux

package httpd_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gracepoll/gracepoll/httpd"
	"github.com/gracepoll/gracepoll/internal/h2frame"
	"github.com/gracepoll/gracepoll/internal/hpack"
	"github.com/gracepoll/gracepoll/internal/selfsigned"
	"github.com/gracepoll/gracepoll/internal/testkit"
)

// h2Server serves srv over h2c (tls false) or TLS, and returns the base
// URL and a client speaking HTTP/2 to it, one connection at a time.
func h2Server(t testing.TB, srv *httpd.Server, useTLS bool) (string, *http.Client) {
	t.Helper()
	if !useTLS {
		p := new(http.Protocols)
		p.SetHTTP1(true)
		p.SetUnencryptedHTTP2(true)
		srv.Protocols = p
		cp := new(http.Protocols)
		cp.SetUnencryptedHTTP2(true)
		tr := &http.Transport{Protocols: cp, MaxConnsPerHost: 1}
		t.Cleanup(tr.CloseIdleConnections)
		return "http://" + serve(t, srv), &http.Client{Transport: tr, Timeout: timeout}
	}
	cert, err := selfsigned.New()
	if err != nil {
		t.Fatal(err)
	}
	srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert.TLS}}
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: cert.Pool()}, ForceAttemptHTTP2: true, MaxConnsPerHost: 1}
	t.Cleanup(tr.CloseIdleConnections)
	return "https://" + serve(t, srv), &http.Client{Transport: tr, Timeout: timeout}
}

// bothH2 runs f over h2c and over TLS.
func bothH2(t *testing.T, f func(t *testing.T, useTLS bool)) {
	t.Run("h2c", func(t *testing.T) { f(t, false) })
	t.Run("tls", func(t *testing.T) { f(t, true) })
}

func getH2(t testing.TB, c *http.Client, url string) (*http.Response, string) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

// TestH2Requests: requests over HTTP/2 see ProtoMajor 2 and their
// fields; bodies of any size go both ways intact, with a Content-Length
// for a short response and none for a long one.
func TestH2Requests(t *testing.T) {
	bothH2(t, func(t *testing.T, useTLS bool) {
		srv := &httpd.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch r.URL.Path {
			case "/echo":
				h := sha256.New()
				n, err := io.Copy(h, r.Body)
				if err != nil {
					http.Error(w, err.Error(), 500)
					return
				}
				fmt.Fprintf(w, "%d %x", n, h.Sum(nil))
			case "/big":
				w.Write(bytes.Repeat([]byte("0123456789abcdef"), 1<<18)) // 4 MiB
			default:
				fmt.Fprintf(w, "%s %d %s %s %s %q", r.Proto, r.ProtoMajor, r.Method, r.Host, r.URL, r.Header.Get("X-A"))
			}
		})}
		base, c := h2Server(t, srv, useTLS)
		req, _ := http.NewRequest("GET", base+"/a?b=c", nil)
		req.Header.Set("X-A", "1")
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		host := strings.TrimPrefix(strings.TrimPrefix(base, "http://"), "https://")
		if want := fmt.Sprintf("HTTP/2.0 2 GET %s /a?b=c \"1\"", host); string(b) != want || resp.ProtoMajor != 2 {
			t.Errorf("got %q over %s, want %q", b, resp.Proto, want)
		}
		if resp.ContentLength != int64(len(b)) {
			t.Errorf("Content-Length %d for a %d-byte body", resp.ContentLength, len(b))
		}
		body := bytes.Repeat([]byte("x"), 5<<20+3)
		resp, err = c.Post(base+"/echo", "application/octet-stream", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		if want := fmt.Sprintf("%d %x", len(body), sha256.Sum256(body)); string(b) != want {
			t.Errorf("upload: got %q, want %q", b, want)
		}
		resp, s := getH2(t, c, base+"/big")
		if len(s) != 4<<20 || resp.ContentLength != -1 {
			t.Errorf("download: %d bytes, Content-Length %d", len(s), resp.ContentLength)
		}
	})
}

// TestH2HeadOfLine: a handler that blocks delays neither the other
// streams of its connection nor other connections. Ten of 100 streams on
// one connection block until released; the 90 others are answered
// meanwhile.
func TestH2HeadOfLine(t *testing.T) {
	bothH2(t, func(t *testing.T, useTLS bool) {
		release := make(chan struct{})
		var blocked atomic.Int32
		srv := &httpd.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/block" {
				blocked.Add(1)
				<-release
			}
			io.WriteString(w, r.URL.Path)
		})}
		base, c := h2Server(t, srv, useTLS)
		getH2(t, c, base+"/warm") // one connection, which the others share
		var wg sync.WaitGroup
		errs := make(chan error, 100)
		for i := range 10 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				resp, err := c.Get(base + "/block")
				if err != nil {
					errs <- fmt.Errorf("blocked stream %d: %v", i, err)
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}()
		}
		testkit.Eventually(t, timeout, "10 handlers blocked", func() bool { return blocked.Load() == 10 })
		start := time.Now()
		var fast sync.WaitGroup
		for i := range 90 {
			fast.Add(1)
			go func() {
				defer fast.Done()
				resp, err := c.Get(fmt.Sprintf("%s/fast%d", base, i))
				if err != nil {
					errs <- err
					return
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if string(b) != fmt.Sprintf("/fast%d", i) || resp.ProtoMajor != 2 {
					errs <- fmt.Errorf("fast%d: %q over %s", i, b, resp.Proto)
				}
			}()
		}
		fast.Wait()
		t.Logf("90 streams answered in %v while 10 on the same connection block", time.Since(start))
		close(release)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
	})
}

// TestH2Cancel: a client that cancels a request resets its stream, and
// the handler sees r.Context() cancelled.
func TestH2Cancel(t *testing.T) {
	bothH2(t, func(t *testing.T, useTLS bool) {
		started, cancelled := make(chan struct{}), make(chan struct{})
		srv := &httpd.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(200)
			w.(http.Flusher).Flush()
			close(started)
			<-r.Context().Done()
			close(cancelled)
		})}
		base, c := h2Server(t, srv, useTLS)
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, "GET", base+"/", nil)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		<-started
		cancel()
		resp.Body.Close()
		select {
		case <-cancelled:
		case <-time.After(timeout):
			t.Fatal("the handler's context was not cancelled by RST_STREAM")
		}
	})
}

// TestH2Trailers: trailers both ways, declared and with
// http.TrailerPrefix; a short body sent with them ends the stream.
func TestH2Trailers(t *testing.T) {
	bothH2(t, func(t *testing.T, useTLS bool) {
		srv := &httpd.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			w.Header().Set("Trailer", "X-Sum")
			w.Write(b)
			w.Header().Set("X-Sum", fmt.Sprintf("%d %s", len(b), r.Trailer.Get("X-Req")))
			w.Header().Set(http.TrailerPrefix+"X-Late", "late")
		})}
		base, c := h2Server(t, srv, useTLS)
		req, _ := http.NewRequest("POST", base+"/", io.NopCloser(strings.NewReader("abc")))
		req.Trailer = http.Header{"X-Req": {"r1"}}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != "abc" || resp.Trailer.Get("X-Sum") != "3 r1" || resp.Trailer.Get("X-Late") != "late" {
			t.Errorf("body %q, trailers %v", b, resp.Trailer)
		}
	})
}

// TestH2Flush: a flushed response reaches the client before its handler
// returns, event by event.
func TestH2Flush(t *testing.T) {
	bothH2(t, func(t *testing.T, useTLS bool) {
		next := make(chan struct{})
		srv := &httpd.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			for i := range 3 {
				fmt.Fprintf(w, "event %d\n", i)
				if err := http.NewResponseController(w).Flush(); err != nil {
					t.Error(err)
				}
				<-next
			}
		})}
		base, c := h2Server(t, srv, useTLS)
		resp, err := c.Get(base + "/")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		buf := make([]byte, 64)
		for i := range 3 {
			n, err := resp.Body.Read(buf)
			if want := fmt.Sprintf("event %d\n", i); string(buf[:n]) != want {
				t.Fatalf("read %q, %v; want %q before the handler went on", buf[:n], err, want)
			}
			next <- struct{}{}
		}
	})
}

// TestH2Interfaces: Pusher answers http.ErrNotSupported; Hijack is not
// offered; ResponseController's deadlines and full duplex work.
func TestH2Interfaces(t *testing.T) {
	bothH2(t, func(t *testing.T, useTLS bool) {
		srv := &httpd.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			var got []string
			p, ok := w.(http.Pusher)
			got = append(got, fmt.Sprint("push:", ok && errors.Is(p.Push("/x", nil), http.ErrNotSupported)))
			_, ok = w.(http.Hijacker)
			got = append(got, fmt.Sprint("hijacker:", ok))
			rc := http.NewResponseController(w)
			got = append(got, fmt.Sprint("deadlines:", rc.SetReadDeadline(time.Now().Add(time.Hour)), rc.SetWriteDeadline(time.Now().Add(time.Hour))))
			got = append(got, fmt.Sprint("duplex:", rc.EnableFullDuplex()))
			io.WriteString(w, strings.Join(got, " "))
		})}
		base, c := h2Server(t, srv, useTLS)
		_, s := getH2(t, c, base+"/")
		if want := "push:true hijacker:false deadlines:<nil> <nil> duplex:<nil>"; s != want {
			t.Errorf("got %q, want %q", s, want)
		}
	})
}

// TestH2WriteDeadline: a write after the response's write deadline
// fails, and the client sees its stream reset.
func TestH2WriteDeadline(t *testing.T) {
	bothH2(t, func(t *testing.T, useTLS bool) {
		werr := make(chan error, 1)
		srv := &httpd.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			rc := http.NewResponseController(w)
			io.WriteString(w, "first")
			rc.Flush()
			rc.SetWriteDeadline(time.Now().Add(50 * time.Millisecond))
			time.Sleep(100 * time.Millisecond)
			_, err := io.WriteString(w, "late")
			werr <- err
		})}
		base, c := h2Server(t, srv, useTLS)
		resp, err := c.Get(base + "/")
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != "first" || err == nil {
			t.Errorf("read %q, %v; want the first write then a reset", b, err)
		}
		if err := <-werr; !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("write after the deadline: %v", err)
		}
	})
}

// TestH2Shutdown: Shutdown sends GOAWAY; the stream in flight finishes
// and its response is complete; the connection then closes, and
// Shutdown returns nil.
func TestH2Shutdown(t *testing.T) {
	bothH2(t, func(t *testing.T, useTLS bool) {
		started, finish := make(chan struct{}), make(chan struct{})
		srv := &httpd.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/slow" {
				close(started)
				<-finish
			}
			io.WriteString(w, "done "+r.URL.Path)
		})}
		base, c := h2Server(t, srv, useTLS)
		getH2(t, c, base+"/warm")
		got := make(chan string, 1)
		go func() {
			resp, err := c.Get(base + "/slow")
			if err != nil {
				got <- err.Error()
				return
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			got <- fmt.Sprint(string(b), err)
		}()
		<-started
		shut := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			shut <- srv.Shutdown(ctx)
		}()
		time.Sleep(50 * time.Millisecond)
		select {
		case err := <-shut:
			t.Fatalf("Shutdown returned %v with a stream in flight", err)
		default:
		}
		close(finish)
		if s := <-got; s != "done /slow<nil>" {
			t.Errorf("in-flight stream: %q", s)
		}
		if err := <-shut; err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})
}

// TestH2IdleHoldsNoGoroutine: connections idle after their requests hold
// no goroutine, and handlers that returned leave none.
func TestH2IdleHoldsNoGoroutine(t *testing.T) {
	srv := &httpd.Server{Handler: http.HandlerFunc(hello)}
	base, _ := h2Server(t, srv, false)
	addr := strings.TrimPrefix(base, "http://")
	var conns []net.Conn
	for range 50 {
		conns = append(conns, h2cRequest(t, addr))
	}
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	// Other tests' goroutines come and go, so the count is of those
	// that are httpd's: a goroutine with a frame of package httpd serves
	// a connection or a stream (the poller's waiters, parked, have none).
	var held []string
	for deadline := time.Now().Add(timeout); ; time.Sleep(10 * time.Millisecond) {
		buf := make([]byte, 1<<20)
		held = held[:0]
		for _, g := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
			// Serve waits for the server's end, and start's goroutine
			// for the transport's: one each per server, none per
			// connection.
			if strings.Contains(g, "gracepoll/httpd.") && !strings.Contains(g, "httpd.(*Server).Serve(") &&
				!strings.Contains(g, "httpd.(*Server).start.func") {
				held = append(held, g)
			}
		}
		if len(held) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines of package httpd with 50 idle HTTP/2 connections:\n%s", len(held), strings.Join(held, "\n\n"))
		}
	}
}

// h2cRequest opens an h2c connection, sends one GET and reads until its
// response's END_STREAM, with no goroutine of its own, and returns the
// connection, left open.
func h2cRequest(t testing.TB, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	enc := hpack.NewEncoder()
	var block []byte
	for _, f := range [][2]string{{":method", "GET"}, {":scheme", "http"}, {":authority", "x"}, {":path", "/"}} {
		block = enc.AppendField(block, hpack.Field{Name: f[0], Value: f[1]})
	}
	out := append([]byte(h2frame.Preface), h2frame.AppendSettings(nil)...)
	out = h2frame.AppendSettingsAck(out)
	out = h2frame.AppendHeaders(out, 1, true, true, block)
	if _, err := c.Write(out); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(timeout))
	var buf []byte
	rd := make([]byte, 4096)
	for {
		f, n, err := h2frame.Parse(buf, h2frame.DefaultMaxFrameSize)
		if err == h2frame.ErrIncomplete {
			m, err := c.Read(rd)
			if err != nil {
				t.Fatal(err)
			}
			buf = append(buf, rd[:m]...)
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if f.Stream == 1 && f.Flags.Has(h2frame.FlagEndStream) && (f.Type == h2frame.TypeData || f.Type == h2frame.TypeHeaders) {
			c.SetReadDeadline(time.Time{})
			return c
		}
		buf = buf[n:]
	}
}

// TestH2ConnState: ConnState sees an HTTP/2 connection new, active while
// a stream runs, idle, and closed.
func TestH2ConnState(t *testing.T) {
	var mu sync.Mutex
	var states []http.ConnState
	closed := make(chan struct{})
	srv := &httpd.Server{Handler: http.HandlerFunc(hello), ConnState: func(_ net.Conn, s http.ConnState) {
		mu.Lock()
		states = append(states, s)
		mu.Unlock()
		if s == http.StateClosed {
			close(closed)
		}
	}}
	base, c := h2Server(t, srv, false)
	getH2(t, c, base+"/")
	c.Transport.(*http.Transport).CloseIdleConnections()
	<-closed
	mu.Lock()
	defer mu.Unlock()
	if got := fmt.Sprint(states); got != "[new active idle closed]" {
		t.Errorf("states %s", got)
	}
}

// TestH2ConcurrentDownloads: large responses on streams of one
// connection arrive intact, each byte where it belongs, whatever the
// windows and the output queue make the writers wait for.
func TestH2ConcurrentDownloads(t *testing.T) {
	bothH2(t, func(t *testing.T, useTLS bool) {
		const size = 16 << 20
		srv := &httpd.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			buf := make([]byte, 32<<10)
			for off := 0; off < size; off += len(buf) {
				for i := range buf {
					buf[i] = byte((off + i) * 7 / 3)
				}
				if _, err := w.Write(buf); err != nil {
					return
				}
			}
		})}
		base, c := h2Server(t, srv, useTLS)
		var wg sync.WaitGroup
		for d := range 4 {
			wg.Go(func() {
				resp, err := c.Get(base + "/")
				if err != nil {
					t.Error(err)
					return
				}
				defer resp.Body.Close()
				buf := make([]byte, 50000)
				off := 0
				for {
					n, err := resp.Body.Read(buf)
					for i := range n {
						if want := byte((off + i) * 7 / 3); buf[i] != want {
							t.Errorf("download %d: byte %d is %#x, want %#x", d, off+i, buf[i], want)
							return
						}
					}
					off += n
					if err != nil {
						if err != io.EOF || off != size {
							t.Errorf("download %d: %d bytes, %v", d, off, err)
						}
						return
					}
				}
			})
		}
		wg.Wait()
	})
}
