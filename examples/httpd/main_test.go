//go:build linux

package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gracepoll/gracepoll/httpd"
	"github.com/gracepoll/gracepoll/internal/selfsigned"
	"github.com/gracepoll/gracepoll/internal/testkit"
)

// timeout bounds every client operation of the tests.
const timeout = 30 * time.Second

// served is the example's handler served by httpd on a loopback port.
type served struct {
	addr string // host:port
	base string // scheme://host:port
	ca   *selfsigned.CA
	log  *requestLog
	srv  *httpd.Server
}

// requestLog records the method, path and status of every request the
// server answered, and its protocol: a browser's view of a page load is
// checked against it.
type requestLog struct {
	mu      sync.Mutex
	started int // handlers called, finished or not
	reqs    []string
	protos  []string
}

func (l *requestLog) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		l.mu.Lock()
		l.started++
		l.mu.Unlock()
		sw := &statusWriter{ResponseWriter: w}
		next.ServeHTTP(sw, r)
		l.mu.Lock()
		l.reqs = append(l.reqs, fmt.Sprintf("%s %s %d", r.Method, r.URL.Path, sw.status()))
		l.protos = append(l.protos, r.Proto)
		l.mu.Unlock()
	})
}

// running is how many handlers have been called and not returned.
func (l *requestLog) running() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.started - len(l.reqs)
}

// all returns the requests as "GET /path 200".
func (l *requestLog) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.reqs...)
}

// withProto returns the requests as "HTTP/2.0 GET /path 200".
func (l *requestLog) withProto() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]string, len(l.reqs))
	for i, r := range l.reqs {
		out[i] = l.protos[i] + " " + r
	}
	return out
}

// serveSite serves newMux on 127.0.0.1:0 (over TLS with a new CA if
// secure) until the test ends, then shuts down and checks that Serve
// returned as it should.
func serveSite(t testing.TB, secure bool) *served {
	t.Helper()
	return serveSiteWith(t, secure, nil)
}

// serveSiteWith is serveSite with httpd.Server.Protocols set to protos
// (nil: the default, HTTP/1.1 and, over TLS, HTTP/2 by ALPN).
func serveSiteWith(t testing.TB, secure bool, protos *http.Protocols) *served {
	t.Helper()
	s := &served{log: &requestLog{}}
	srv := &httpd.Server{Handler: s.log.wrap(newMux()), ErrorLog: log.New(io.Discard, "", 0), Protocols: protos}
	s.srv = srv
	if secure {
		ca, err := selfsigned.NewCA("gracepoll examples/httpd CA")
		if err != nil {
			t.Fatal(err)
		}
		s.ca, srv.TLSConfig = ca, ca.ServerConfig()
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.addr = l.Addr().String()
	s.base = "http://" + s.addr
	if secure {
		_, port, _ := net.SplitHostPort(s.addr)
		s.base = "https://localhost:" + port
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		select {
		case err := <-done:
			if !errors.Is(err, http.ErrServerClosed) {
				t.Errorf("Serve returned %v, want http.ErrServerClosed", err)
			}
		case <-time.After(timeout):
			t.Errorf("Serve did not return after Shutdown")
		}
	})
	return s
}

// client is a Go HTTP/1.1 client for s: it dials s.addr whatever the
// URL's host (so https://localhost works when localhost resolves to ::1
// first) and trusts s's CA only.
func (s *served) client() *http.Client {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "tcp", s.addr)
		},
		MaxIdleConnsPerHost: 64,
	}
	if s.ca != nil {
		pool := x509.NewCertPool()
		pool.AddCert(s.ca.Cert)
		tr.TLSClientConfig = &tls.Config{RootCAs: pool}
	}
	return &http.Client{Transport: tr, Timeout: timeout}
}

// get fetches path and returns the body, failing the test unless the
// status is 200.
func get(t testing.TB, c *http.Client, url string) []byte {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: reading the body: %v", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s: %s", url, resp.Status, b)
	}
	return b
}

// randomBytes returns n random bytes and their SHA-256 in hex.
func randomBytes(t testing.TB, n int) ([]byte, string) {
	t.Helper()
	b := make([]byte, n)
	rand.Read(b)
	sum := sha256.Sum256(b)
	return b, hex.EncodeToString(sum[:])
}

// checkPattern reads r to EOF and reports the first byte that differs
// from the /download pattern, and the count read.
func checkPattern(r io.Reader) (int64, error) {
	buf := make([]byte, 256<<10)
	var off int64
	for {
		n, err := r.Read(buf)
		for i := range n {
			if want := byte((off + int64(i)) % 251); buf[i] != want {
				return off + int64(i), fmt.Errorf("byte %d is %#x, want %#x", off+int64(i), buf[i], want)
			}
		}
		off += int64(n)
		if err == io.EOF {
			return off, nil
		}
		if err != nil {
			return off, err
		}
	}
}

// TestRoutes checks each route's answer with Go's client.
func TestRoutes(t *testing.T) {
	s := serveSite(t, false)
	c := s.client()

	page := string(get(t, c, s.base+"/"))
	if !strings.Contains(page, `<strong id="page-proto">HTTP/1.1</strong>`) {
		t.Errorf("the page does not name its protocol, HTTP/1.1:\n%s", page)
	}
	for _, ref := range []string{"/static/style.css", "/static/app.js", "/static/logo.svg"} {
		if !strings.Contains(page, ref) {
			t.Errorf("the page does not reference %s", ref)
		}
		get(t, c, s.base+ref)
	}
	if resp, err := c.Get(s.base + "/nothing-here"); err != nil || resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET /nothing-here: %v %v, want 404", resp, err)
	} else {
		resp.Body.Close()
	}
	if resp, err := c.Post(s.base+"/json", "text/plain", nil); err != nil || resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /json: %v %v, want 405", resp, err)
	} else {
		resp.Body.Close()
	}

	var tr timeReply
	if err := json.Unmarshal(get(t, c, s.base+"/api/time"), &tr); err != nil || time.Since(tr.Time).Abs() > time.Minute || tr.Proto != "HTTP/1.1" {
		t.Errorf("/api/time: %+v %v", tr, err)
	}
	if got := string(get(t, c, s.base+"/plaintext")); got != "Hello, World!" {
		t.Errorf("/plaintext: %q", got)
	}
	if got := string(get(t, c, s.base+"/json")); got != `{"message":"Hello, World!"}`+"\n" {
		t.Errorf("/json: %q", got)
	}
	if resp, err := c.Get(s.base + "/download?size=-1"); err != nil || resp.StatusCode != http.StatusBadRequest {
		t.Errorf("/download?size=-1: %v %v, want 400", resp, err)
	} else {
		resp.Body.Close()
	}

	// Echo: the body comes back when short, only its digest when long.
	for _, n := range []int{0, 1, echoBodyMax, echoBodyMax + 1, 1 << 20} {
		body, _ := randomBytes(t, n)
		// Text: JSON carries a string of UTF-8, so the echo of other
		// bytes would not compare equal.
		for i := range body {
			body[i] = 'a' + body[i]%26
		}
		s256 := sha256.Sum256(body)
		sum := hex.EncodeToString(s256[:])
		resp, err := c.Post(s.base+"/api/echo", "application/octet-stream", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		var er echoReply
		err = json.NewDecoder(resp.Body).Decode(&er)
		resp.Body.Close()
		switch {
		case err != nil:
			t.Errorf("echo of %d bytes: %v", n, err)
		case er.Length != int64(n) || er.SHA256 != sum:
			t.Errorf("echo of %d bytes: %+v, want sha256 %s", n, er, sum)
		case (er.Body != nil) != (n <= echoBodyMax):
			t.Errorf("echo of %d bytes: body returned: %v", n, er.Body != nil)
		case er.Body != nil && *er.Body != string(body):
			t.Errorf("echo of %d bytes: the body differs", n)
		}
	}
}

// TestKeepAliveConcurrent sends requests on kept-alive connections, one
// at a time (every request after the first reuses the connection) and
// from many goroutines at once, each answer checked.
func TestKeepAliveConcurrent(t *testing.T) {
	s := serveSite(t, false)
	c := s.client()
	var reused, fresh int
	trace := &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) {
		if info.Reused {
			reused++
		} else {
			fresh++
		}
	}}
	for range 20 {
		req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), "GET", s.base+"/json", nil)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	if fresh != 1 || reused != 19 {
		t.Errorf("20 sequential requests: %d new connections, %d reused; want 1 and 19", fresh, reused)
	}

	const workers, each = 32, 25
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				body := fmt.Sprintf("worker %d request %d", w, i)
				resp, err := c.Post(s.base+"/api/echo", "text/plain", strings.NewReader(body))
				if err != nil {
					errs <- err
					return
				}
				var er echoReply
				err = json.NewDecoder(resp.Body).Decode(&er)
				resp.Body.Close()
				if err != nil || er.Body == nil || *er.Body != body {
					errs <- fmt.Errorf("echo of %q: %+v %v", body, er, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestDownload64MiB checks a 64 MiB download byte for byte, over TLS
// too.
func TestDownload64MiB(t *testing.T) {
	for _, secure := range []bool{false, true} {
		s := serveSite(t, secure)
		const size = 64 << 20
		resp, err := s.client().Get(fmt.Sprintf("%s/download?size=%d", s.base, size))
		if err != nil {
			t.Fatal(err)
		}
		if resp.ContentLength != size {
			t.Errorf("TLS %v: Content-Length %d, want %d", secure, resp.ContentLength, size)
		}
		start := time.Now()
		n, err := checkPattern(resp.Body)
		resp.Body.Close()
		if err != nil || n != size {
			t.Errorf("TLS %v: read %d bytes: %v", secure, n, err)
		}
		t.Logf("TLS %v: 64 MiB in %v", secure, time.Since(start).Round(time.Millisecond))
	}
}

// TestTLSClient checks the certificate chain and protocol a Go client
// gets: verified against the CA alone; h2 by ALPN when the client offers
// it, and HTTP/1.1 when it does not.
func TestTLSClient(t *testing.T) {
	s := serveSite(t, true)
	for _, h2 := range []bool{false, true} {
		c := s.client()
		// A Transport with its own DialContext offers h2 only when told.
		c.Transport.(*http.Transport).ForceAttemptHTTP2 = h2
		resp, err := c.Get(s.base + "/json")
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		// Without h2 the Transport sends no ALPN extension at all, and
		// the server chooses none.
		wantALPN, wantProto := "", "HTTP/1.1"
		if h2 {
			wantALPN, wantProto = "h2", "HTTP/2.0"
		}
		if resp.TLS == nil || !resp.TLS.HandshakeComplete || resp.Proto != wantProto || resp.TLS.NegotiatedProtocol != wantALPN {
			t.Fatalf("h2 offered %v: TLS %+v, protocol %s; want %q and %s", h2, resp.TLS, resp.Proto, wantALPN, wantProto)
		}
		if len(resp.TLS.VerifiedChains) != 1 || len(resp.TLS.VerifiedChains[0]) != 2 || !resp.TLS.VerifiedChains[0][1].Equal(s.ca.Cert) {
			t.Errorf("verified chains %v: want the leaf and the CA", resp.TLS.VerifiedChains)
		}
	}
	// A client that does not trust the CA is refused.
	strange := &http.Client{Transport: &http.Transport{DialContext: s.client().Transport.(*http.Transport).DialContext}, Timeout: timeout}
	if _, err := strange.Get(s.base + "/json"); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("a client without the CA: %v, want a certificate error", err)
	}
}

// checkFlushedStream reads n events of /stream's response as they come:
// each must arrive on its own, about 100 ms after the one before, which
// only flushing gives.
func checkFlushedStream(t *testing.T, resp *http.Response, n int) {
	t.Helper()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Errorf("Content-Type %q", ct)
	}
	sc := bufio.NewScanner(resp.Body)
	var at []time.Time
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "data: ") {
			at = append(at, time.Now())
		}
	}
	if err := sc.Err(); err != nil || len(at) != n {
		t.Fatalf("%d events: %v", len(at), err)
	}
	for i := 1; i < len(at); i++ {
		if gap := at[i].Sub(at[i-1]); gap < 50*time.Millisecond {
			t.Errorf("event %d came %v after the one before: not flushed one by one", i+1, gap)
		}
	}
}

// TestStreamFlushes reads /stream's events as they come: each must
// arrive on its own, about 100 ms after the one before, which only
// flushing gives.
func TestStreamFlushes(t *testing.T) {
	s := serveSite(t, false)
	resp, err := s.client().Get(s.base + "/stream?n=5")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	checkFlushedStream(t, resp, 5)
}

// TestUpload uploads with Go's client: a known length, and chunked.
func TestUpload(t *testing.T) {
	s := serveSite(t, false)
	c := s.client()
	body, _ := randomBytes(t, 5<<20)
	for _, chunked := range []bool{false, true} {
		var r io.Reader = bytes.NewReader(body)
		if chunked {
			r = io.MultiReader(r) // hides the length: the client sends it chunked
		}
		req, _ := http.NewRequest("PUT", s.base+"/upload", r)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var ur uploadReply
		err = json.NewDecoder(resp.Body).Decode(&ur)
		resp.Body.Close()
		if err != nil || ur.Bytes != int64(len(body)) {
			t.Errorf("chunked %v: %+v %v, want %d bytes", chunked, ur, err, len(body))
		}
	}
}

// startRun runs the program with args (and -addr 127.0.0.1:0) until the
// returned cancel, the signal in main; wait returns run's error.
func startRun(t *testing.T, args ...string) (addr string, out *testkit.SyncBuffer, stop func(), wait func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	out = &testkit.SyncBuffer{}
	ready := make(chan net.Addr, 1)
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, append([]string{"-addr", "127.0.0.1:0"}, args...), out, out, ready)
	}()
	select {
	case a := <-ready:
		addr = a.String()
	case err := <-done:
		t.Fatalf("run: %v\n%s", err, out)
	}
	var once sync.Once
	var err error
	wait = func() error {
		once.Do(func() {
			select {
			case err = <-done:
			case <-time.After(timeout):
				err = errors.New("run did not return")
			}
		})
		return err
	}
	t.Cleanup(func() { cancel(); wait() })
	return addr, out, cancel, wait
}

// TestRunShutdown runs the program: a download in progress when the
// signal comes finishes (a clean shutdown), and one that cannot finish
// within -shutdown-timeout is cut, as the output says, and promptly.
func TestRunShutdown(t *testing.T) {
	for _, endless := range []bool{false, true} {
		addr, out, stop, wait := startRun(t, "-v", "-shutdown-timeout", "1s")
		if !strings.Contains(out.String(), "serving http://"+addr) {
			t.Fatalf("output: %s", out)
		}
		size := int64(8 << 20)
		if endless {
			size = maxDownloadBytes
		}
		resp, err := http.Get(fmt.Sprintf("http://%s/download?size=%d", addr, size))
		if err != nil {
			t.Fatal(err)
		}
		// Let the first bytes through, then ask for the shutdown with the
		// rest still to come.
		first := make([]byte, 1<<10)
		if _, err := io.ReadFull(resp.Body, first); err != nil {
			t.Fatal(err)
		}
		stop()
		t0 := time.Now()
		time.Sleep(100 * time.Millisecond)
		n, err := checkPattern(io.MultiReader(bytes.NewReader(first), resp.Body))
		resp.Body.Close()
		t.Logf("endless %v: read %d bytes, %v, after %v", endless, n, err, time.Since(t0))
		rerr := wait()
		took := time.Since(t0)
		t.Logf("endless %v: run returned after %v", endless, took)
		// The grace is 1 s; when it ends, Shutdown cancels the
		// handler's context and resets its connection, so the handler
		// stops, rather than after the whole 16 GiB.
		if took > 6*time.Second {
			t.Errorf("endless %v: run returned %v after the signal, with -shutdown-timeout 1s", endless, took)
		}
		if rerr != nil {
			t.Fatalf("run: %v", rerr)
		}
		got := out.String()
		if endless {
			if err == nil || n >= size {
				t.Errorf("endless download: read %d bytes, %v: want it cut", n, err)
			}
			if !strings.Contains(got, "shutdown timed out after 1s") {
				t.Errorf("output lacks the timeout:\n%s", got)
			}
		} else {
			if err != nil || n != size {
				t.Errorf("download in progress at shutdown: %d bytes, %v; want all %d", n, err, size)
			}
			if !strings.Contains(got, "shut down cleanly") {
				t.Errorf("output lacks the clean shutdown:\n%s", got)
			}
		}
		// -v logged the request (with its size) once it ended.
		if !endless && !strings.Contains(got, fmt.Sprintf("GET /download?size=%d 200 %dB", size, size)) {
			t.Errorf("-v did not log the download:\n%s", got)
		}
	}
}

// TestFlags checks that bad command lines are refused.
func TestFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-tls-cacert-out", "x.pem"},
		{"-shutdown-timeout", "0s"},
		{"extra"},
		{"-addr", "256.0.0.1:0"},
		{"-h2c", "-tls-self-signed"},
	} {
		if err := run(context.Background(), args, io.Discard, io.Discard, nil); err == nil {
			t.Errorf("%q: accepted", args)
		}
	}
	// Refused for what it means, not as an unknown flag: the name is the
	// one the README and the other examples give.
	err := run(context.Background(), []string{"-tls-cacert-out", "x.pem"}, io.Discard, io.Discard, nil)
	if err == nil || err.Error() != "-tls-cacert-out needs -tls-self-signed" {
		t.Errorf("-tls-cacert-out without -tls-self-signed: %v", err)
	}
}
