//go:build linux

package httpd_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"maps"
	"mime/multipart"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/gracepoll/gracepoll/httpd"
)

// The suite's handler and cases: a case's request goes to a path of
// suiteHandler, whose first segment picks the handler.

var (
	suiteModTime = time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)
	suiteContent = strings.Repeat("0123456789", 100)
)

// suiteHandler routes a request by its path's first segment. Handlers
// that show what they were given write it as the body, so that it is
// compared too.
func suiteHandler(t testing.TB) http.Handler {
	routes := map[string]http.Handler{
		"echo":      http.HandlerFunc(echoRequest),
		"hello":     http.HandlerFunc(hello),
		"status":    http.HandlerFunc(statusHandler),
		"write":     http.HandlerFunc(writeHandler),
		"size":      http.HandlerFunc(sizeHandler),
		"flush":     http.HandlerFunc(flushHandler),
		"rc":        http.HandlerFunc(controllerHandler),
		"trailer":   http.HandlerFunc(trailerHandler),
		"hints":     http.HandlerFunc(hintsHandler),
		"sniff":     http.HandlerFunc(sniffHandler),
		"error":     http.HandlerFunc(errorHandler),
		"redirect":  http.HandlerFunc(redirectHandler),
		"content":   http.HandlerFunc(contentHandler),
		"fs":        http.StripPrefix("/fs", http.FileServerFS(suiteFS())),
		"timeout":   timeoutHandler(),
		"proxy":     proxyHandler(t, false),
		"proxydown": proxyHandler(t, true),
		"strip":     http.StripPrefix("/strip", http.HandlerFunc(pathHandler)),
		"maxbytes":  http.HandlerFunc(maxBytesHandler),
		"mux":       suiteMux(),
		"form":      http.HandlerFunc(formHandler),
		"multipart": http.HandlerFunc(multipartHandler),
		"read":      http.HandlerFunc(readHandler),
		"panic":     http.HandlerFunc(panicHandler),
		"ctx":       http.HandlerFunc(contextHandler),
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		first, _, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
		if h, ok := routes[first]; ok {
			h.ServeHTTP(w, r)
			return
		}
		http.Error(w, "no route for "+r.URL.Path, http.StatusNotFound)
	})
}

// segment returns the i-th segment of r's path (0 is the route's).
func segment(r *http.Request, i int) string {
	s := strings.Split(strings.TrimPrefix(r.URL.Path, "/"), "/")
	if i < len(s) {
		return s[i]
	}
	return ""
}

// echoRequest writes what a handler sees of its request, the body and
// trailers read to their end.
func echoRequest(w http.ResponseWriter, r *http.Request) {
	var b strings.Builder
	fmt.Fprintf(&b, "method %q host %q\n", r.Method, r.Host)
	fmt.Fprintf(&b, "url %q path %q rawpath %q query %q scheme %q urlhost %q\n", r.URL.String(), r.URL.Path, r.URL.RawPath, r.URL.RawQuery, r.URL.Scheme, r.URL.Host)
	fmt.Fprintf(&b, "requesturi %q proto %q %d.%d\n", r.RequestURI, r.Proto, r.ProtoMajor, r.ProtoMinor)
	for _, k := range slices.Sorted(maps.Keys(r.Header)) {
		fmt.Fprintf(&b, "header %q %q\n", k, r.Header[k])
	}
	fmt.Fprintf(&b, "contentlength %d transferencoding %q close %v\n", r.ContentLength, r.TransferEncoding, r.Close)
	host, port, err := net.SplitHostPort(r.RemoteAddr)
	p, _ := strconv.Atoi(port)
	fmt.Fprintf(&b, "remote %q port ok %v err %v\n", host, p > 0, err)
	fmt.Fprintf(&b, "tls %v", r.TLS != nil)
	if r.TLS != nil {
		fmt.Fprintf(&b, " alpn %q complete %v servername %q", r.TLS.NegotiatedProtocol, r.TLS.HandshakeComplete, r.TLS.ServerName)
	}
	fmt.Fprintf(&b, "\ntrailer before the body %v\n", r.Trailer)
	body, err := io.ReadAll(r.Body)
	fmt.Fprintf(&b, "body %d %q err %v\n", len(body), body[:min(len(body), 64)], err)
	fmt.Fprintf(&b, "trailer %v\n", r.Trailer)
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	io.WriteString(w, b.String())
}

// statusHandler: /status/CODE[/BODY] writes the header CODE, then BODY.
func statusHandler(w http.ResponseWriter, r *http.Request) {
	code, _ := strconv.Atoi(segment(r, 1))
	w.Header().Set("X-Status", strconv.Itoa(code))
	w.WriteHeader(code)
	if body := segment(r, 2); body != "" {
		_, err := io.WriteString(w, body)
		w.Header().Set("X-Ignored", fmt.Sprint(err)) // after the head: not sent
	}
}

// writeHandler: WriteHeader and Write in unusual orders.
func writeHandler(w http.ResponseWriter, r *http.Request) {
	switch segment(r, 1) {
	case "twice":
		w.WriteHeader(http.StatusCreated)
		w.WriteHeader(http.StatusInternalServerError) // superfluous
		io.WriteString(w, "created")
	case "after-write":
		io.WriteString(w, "ok")
		w.WriteHeader(http.StatusInternalServerError)
	case "empty":
		n, err := w.Write(nil)
		w.Header().Set("X-Late", fmt.Sprint(n, err))
	case "nothing":
	case "header-only":
		w.Header().Set("X-A", "1")
		w.Header().Add("X-A", "2")
		w.WriteHeader(http.StatusAccepted)
	case "cl-short": // declares more than it writes: the client waits
		w.Header().Set("Content-Length", "10")
		io.WriteString(w, "hello")
	case "cl-over": // writes more than it declares
		w.Header().Set("Content-Length", "3")
		_, err := io.WriteString(w, "hello")
		w.Header().Set("X-Err", fmt.Sprint(err))
	case "cl-exact":
		w.Header().Set("Content-Length", "5")
		io.WriteString(w, "hello")
	case "cl-large":
		w.Header().Set("Content-Length", "100000")
		io.WriteString(w, strings.Repeat("z", 100000))
	case "many-writes":
		for i := range 1000 {
			fmt.Fprintf(w, "%d,", i)
		}
	}
}

// sizeHandler: /size/N writes N bytes in writes of ?w= bytes (all at once
// by default).
func sizeHandler(w http.ResponseWriter, r *http.Request) {
	n, _ := strconv.Atoi(segment(r, 1))
	step, _ := strconv.Atoi(r.URL.Query().Get("w"))
	if step <= 0 {
		step = n
	}
	body := []byte(strings.Repeat("abcdefghij", n/10+1)[:n])
	for len(body) > 0 {
		k := min(step, len(body))
		w.Write(body[:k])
		body = body[k:]
	}
}

func flushHandler(w http.ResponseWriter, r *http.Request) {
	f := w.(http.Flusher)
	switch segment(r, 1) {
	case "nothing":
		f.Flush()
	case "between":
		io.WriteString(w, "first ")
		f.Flush()
		io.WriteString(w, "second")
	case "header":
		w.WriteHeader(http.StatusAccepted)
		f.Flush()
	case "204":
		w.WriteHeader(http.StatusNoContent)
		f.Flush()
	case "cl": // a declared length, flushed: no chunking
		w.Header().Set("Content-Length", "11")
		io.WriteString(w, "hello ")
		f.Flush()
		io.WriteString(w, "world")
	case "many":
		for i := range 5 {
			fmt.Fprintf(w, "part %d\n", i)
			f.Flush()
		}
	}
}

func controllerHandler(w http.ResponseWriter, r *http.Request) {
	rc := http.NewResponseController(w)
	switch segment(r, 1) {
	case "flush":
		io.WriteString(w, "a")
		err := rc.Flush()
		fmt.Fprintf(w, " flushed %v", err)
	case "write-deadline":
		err := rc.SetWriteDeadline(time.Now().Add(time.Minute))
		fmt.Fprintf(w, "deadline %v", err)
	case "read-deadline":
		err := rc.SetReadDeadline(time.Now().Add(time.Minute))
		b, rerr := io.ReadAll(r.Body)
		fmt.Fprintf(w, "deadline %v read %q %v", err, b, rerr)
	case "full-duplex":
		err := rc.EnableFullDuplex()
		fmt.Fprintf(w, "full duplex %v\n", err)
		rc.Flush()
		b, rerr := io.ReadAll(r.Body)
		fmt.Fprintf(w, "read %q %v", b, rerr)
	case "clear-deadline":
		err := rc.SetWriteDeadline(time.Time{})
		fmt.Fprintf(w, "deadline %v", err)
	}
}

func trailerHandler(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	switch segment(r, 1) {
	case "declared":
		h.Set("Trailer", "X-Sum")
		io.WriteString(w, "body")
		h.Set("X-Sum", "42")
	case "two":
		h.Add("Trailer", "X-A, X-B")
		h.Add("Trailer", "X-C")
		io.WriteString(w, "body")
		h.Set("X-A", "a")
		h.Set("X-C", "c") // X-B declared, never set
	case "prefix": // after a small body: net/http's framing was decided without it
		io.WriteString(w, "body")
		h.Set(http.TrailerPrefix+"X-Late", "late")
	case "prefix-first":
		h.Set(http.TrailerPrefix+"X-Early", "early")
		io.WriteString(w, "body")
		h.Set(http.TrailerPrefix+"X-Late", "late")
	case "prefix-after-flush":
		io.WriteString(w, "body")
		w.(http.Flusher).Flush()
		h.Set(http.TrailerPrefix+"X-Late", "late")
	case "after-flush":
		h.Set("Trailer", "X-Sum")
		io.WriteString(w, "body")
		w.(http.Flusher).Flush()
		io.WriteString(w, " more")
		h.Set("X-Sum", "7")
	case "undeclared":
		io.WriteString(w, "body")
		w.(http.Flusher).Flush()
		h.Set("X-Undeclared", "not sent")
	case "forbidden":
		h.Set("Trailer", "Content-Length, X-Ok")
		io.WriteString(w, "body")
		h.Set("Content-Length", "99")
		h.Set("X-Ok", "ok")
	case "large":
		h.Set("Trailer", "X-Sum")
		io.WriteString(w, strings.Repeat("L", 5000))
		h.Set("X-Sum", "5000")
	case "no-body":
		h.Set("Trailer", "X-Sum")
		h.Set("X-Sum", "0")
	case "204":
		h.Set("Trailer", "X-Sum")
		w.WriteHeader(http.StatusNoContent)
		h.Set("X-Sum", "0")
	case "cl":
		h.Set("Trailer", "X-Sum")
		h.Set("Content-Length", "4")
		io.WriteString(w, "body")
		h.Set("X-Sum", "4")
	}
}

func hintsHandler(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	switch segment(r, 1) {
	case "one":
		h.Set("Link", "</a.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		io.WriteString(w, "final")
	case "two":
		h.Set("Link", "</a.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		h.Add("Link", "</b.js>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		h.Set("X-Final", "1")
		w.WriteHeader(http.StatusCreated)
	case "then-204":
		h.Set("Link", "</a.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		w.WriteHeader(http.StatusNoContent)
	case "after-final":
		w.WriteHeader(http.StatusOK)
		w.WriteHeader(http.StatusEarlyHints) // too late: superfluous
		io.WriteString(w, "final")
	case "processing":
		w.WriteHeader(http.StatusProcessing)
		io.WriteString(w, "final")
	case "continue":
		w.WriteHeader(http.StatusContinue)
		b, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "read %q", b)
	case "flushed":
		h.Set("Link", "</a.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		w.(http.Flusher).Flush()
		io.WriteString(w, "final")
	}
}

func sniffHandler(w http.ResponseWriter, r *http.Request) {
	body := map[string]string{
		"html":  "<!DOCTYPE html><html><body>hi</body></html>",
		"png":   "\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR",
		"text":  "just some text",
		"json":  `{"a": 1}`,
		"gzip":  "\x1f\x8b\x08\x00\x00\x00\x00\x00",
		"pdf":   "%PDF-1.4\n",
		"large": "<html>" + strings.Repeat("x", 4000),
	}
	switch kind := segment(r, 1); kind {
	case "empty":
	case "suppressed":
		w.Header()["Content-Type"] = nil
		io.WriteString(w, body["html"])
	case "nosniff":
		w.Header().Set("X-Content-Type-Options", "nosniff")
		io.WriteString(w, body["html"])
	case "explicit":
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, body["html"])
	default:
		io.WriteString(w, body[kind])
	}
}

func errorHandler(w http.ResponseWriter, r *http.Request) {
	switch segment(r, 1) {
	case "teapot":
		http.Error(w, "short and stout", http.StatusTeapot)
	case "headers": // http.Error drops the length and type set before
		w.Header().Set("Content-Length", "1000")
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Keep", "1")
		http.Error(w, "oops", http.StatusInternalServerError)
	case "notfound":
		http.NotFound(w, r)
	}
}

func redirectHandler(w http.ResponseWriter, r *http.Request) {
	code, _ := strconv.Atoi(segment(r, 1))
	http.Redirect(w, r, r.URL.Query().Get("to"), code)
}

func contentHandler(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Etag", `"v1"`)
	http.ServeContent(w, r, "data.txt", suiteModTime, strings.NewReader(suiteContent))
}

func suiteFS() fstest.MapFS {
	return fstest.MapFS{
		"index.html":  {Data: []byte("<html><body>index</body></html>"), ModTime: suiteModTime},
		"a.txt":       {Data: []byte(suiteContent), ModTime: suiteModTime},
		"dir/b.css":   {Data: []byte("body { color: red }"), ModTime: suiteModTime},
		"dir/c.json":  {Data: []byte(`{"c": 3}`), ModTime: suiteModTime},
		"big.bin":     {Data: []byte(strings.Repeat("\x00\x01binary", 30000)), ModTime: suiteModTime},
		"sub/x.html":  {Data: []byte("<p>x</p>"), ModTime: suiteModTime},
		"empty.txt":   {Data: nil, ModTime: suiteModTime},
		"unicode.txt": {Data: []byte("héllo wörld"), ModTime: suiteModTime},
	}
}

func timeoutHandler() http.Handler {
	inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if segment(r, 1) == "slow" {
			select {
			case <-r.Context().Done():
			case <-time.After(5 * time.Second):
			}
		}
		w.Header().Set("X-Inner", "1")
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "in time")
	})
	fast := http.TimeoutHandler(inner, 5*time.Second, "too slow")
	slow := http.TimeoutHandler(inner, 20*time.Millisecond, "too slow")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if segment(r, 1) == "slow" {
			slow.ServeHTTP(w, r)
			return
		}
		fast.ServeHTTP(w, r)
	})
}

// proxyHandler is a httputil.ReverseProxy to a net/http backend (or, if
// down, to a closed port).
func proxyHandler(t testing.TB, down bool) http.Handler {
	backend := http.NewServeMux()
	backend.HandleFunc("/proxy/hello", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Backend", "1")
		io.WriteString(w, "from the backend")
	})
	backend.HandleFunc("/proxy/trailer", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Trailer", "X-Sum")
		io.WriteString(w, "abc")
		w.(http.Flusher).Flush()
		io.WriteString(w, "def")
		w.Header().Set("X-Sum", "6")
	})
	backend.HandleFunc("/proxy/big", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, strings.Repeat("big ", 25000))
	})
	backend.HandleFunc("/proxy/echo", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "%s %s host %q xff %q body %q", r.Method, r.URL, r.Host, r.Header.Get("X-Forwarded-For"), b)
	})
	backend.HandleFunc("/proxy/204", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	})
	ts := httptest.NewUnstartedServer(backend)
	ts.Config.ErrorLog = log.New(io.Discard, "", 0)
	ts.Start()
	t.Cleanup(ts.Close)
	u, _ := url.Parse(ts.URL)
	if down {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		u.Host = l.Addr().String()
		l.Close()
	}
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.Transport = tr
	rp.ErrorLog = log.New(io.Discard, "", 0)
	return rp
}

// pathHandler writes the path as StripPrefix left it.
func pathHandler(w http.ResponseWriter, r *http.Request) {
	fmt.Fprintf(w, "path %q rawpath %q requesturi %q", r.URL.Path, r.URL.RawPath, r.RequestURI)
}

func maxBytesHandler(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 8)
	b, err := io.ReadAll(r.Body)
	if err != nil {
		var mbe *http.MaxBytesError
		http.Error(w, fmt.Sprintf("too large: %v (limit %d)", errors.As(err, &mbe), mbe.Limit), http.StatusRequestEntityTooLarge)
		return
	}
	fmt.Fprintf(w, "read %q", b)
}

func suiteMux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /mux/items/{id}", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "item %q", r.PathValue("id"))
	})
	mux.HandleFunc("POST /mux/items", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "created %q", b)
	})
	mux.HandleFunc("/mux/dir/", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "dir %q", r.URL.Path)
	})
	mux.HandleFunc("GET /mux/files/{path...}", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "file %q", r.PathValue("path"))
	})
	mux.HandleFunc("/mux/exact/{$}", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "exact")
	})
	mux.HandleFunc("x.example/mux/host", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "host pattern")
	})
	return mux
}

func formHandler(w http.ResponseWriter, r *http.Request) {
	err := r.ParseForm()
	fmt.Fprintf(w, "err %v\nform %v\npostform %v\n", err, r.Form, r.PostForm)
}

func multipartHandler(w http.ResponseWriter, r *http.Request) {
	err := r.ParseMultipartForm(1 << 20)
	fmt.Fprintf(w, "err %v\n", err)
	if r.MultipartForm != nil {
		fmt.Fprintf(w, "values %v\n", r.MultipartForm.Value)
		for _, k := range slices.Sorted(maps.Keys(r.MultipartForm.File)) {
			for _, fh := range r.MultipartForm.File[k] {
				fmt.Fprintf(w, "file %s %q %d %v\n", k, fh.Filename, fh.Size, fh.Header)
			}
		}
	}
}

// readHandler reads a request body in some way, and writes what it got.
func readHandler(w http.ResponseWriter, r *http.Request) {
	switch segment(r, 1) {
	case "none":
		io.WriteString(w, "not read")
	case "none-later": // not read, returning once the client has sent it all
		time.Sleep(200 * time.Millisecond)
		io.WriteString(w, "not read")
	case "some": // 5 bytes of it
		b := make([]byte, 5)
		n, err := io.ReadFull(r.Body, b)
		fmt.Fprintf(w, "read %q %v", b[:n], err)
	case "past": // to its end, then again, then after Close
		b, err := io.ReadAll(r.Body)
		n, err2 := r.Body.Read(make([]byte, 10))
		r.Body.Close()
		n3, err3 := r.Body.Read(make([]byte, 10))
		fmt.Fprintf(w, "read %d %v; again %d %v; after close %d %v", len(b), err, n, err2, n3, err3)
	case "first": // one Read, answered at once: what had arrived when the handler ran
		rc := http.NewResponseController(w)
		rc.EnableFullDuplex()
		b := make([]byte, 64<<10)
		n, err := r.Body.Read(b)
		fmt.Fprintf(w, "first %q %v\n", b[:n], err)
		rc.Flush()
		rest, err := io.ReadAll(r.Body)
		fmt.Fprintf(w, "rest %q %v", rest, err)
	case "all":
		b, err := io.ReadAll(r.Body)
		fmt.Fprintf(w, "read %d %v", len(b), err)
	case "close": // closed without reading
		err := r.Body.Close()
		fmt.Fprintf(w, "closed %v", err)
	}
}

func panicHandler(w http.ResponseWriter, r *http.Request) {
	switch segment(r, 1) {
	case "abort":
		panic(http.ErrAbortHandler)
	case "value":
		panic("boom")
	case "after-write":
		io.WriteString(w, "partial")
		panic("boom")
	case "after-header":
		w.WriteHeader(http.StatusCreated)
		panic("boom")
	case "after-flush":
		io.WriteString(w, "partial")
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler)
	case "after-large-write":
		io.WriteString(w, strings.Repeat("p", 3000))
		panic(http.ErrAbortHandler)
	}
}

// contextHandler writes what the request's context holds.
func contextHandler(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	_, hasDeadline := ctx.Deadline()
	fmt.Fprintf(w, "err %v deadline %v\n", ctx.Err(), hasDeadline)
	local, _ := ctx.Value(http.LocalAddrContextKey).(net.Addr)
	if local != nil {
		host, port, _ := net.SplitHostPort(local.String())
		p, _ := strconv.Atoi(port)
		fmt.Fprintf(w, "local %T %s %s port ok %v\n", local, local.Network(), host, p > 0)
	} else {
		fmt.Fprintf(w, "local %v\n", ctx.Value(http.LocalAddrContextKey))
	}
	fmt.Fprintf(w, "server %T\n", ctx.Value(http.ServerContextKey))
	select {
	case <-ctx.Done():
		io.WriteString(w, "done\n")
	default:
		io.WriteString(w, "not done\n")
	}
	if segment(r, 1) == "value" {
		ctx = context.WithValue(ctx, ctxKey{}, "v")
		fmt.Fprintf(w, "value %v\n", ctx.Value(ctxKey{}))
	}
}

type ctxKey struct{}

// Request builders for the cases.

// rq is a request: its request line, header fields and body.
func rq(line string, fields []string, body string) string {
	var b strings.Builder
	b.WriteString(line + "\r\n")
	for _, f := range fields {
		b.WriteString(f + "\r\n")
	}
	b.WriteString("\r\n" + body)
	return b.String()
}

// get is a GET of path with Host and the fields given.
func get(path string, fields ...string) string {
	return rq("GET "+path+" HTTP/1.1", append([]string{"Host: x"}, fields...), "")
}

func head(path string, fields ...string) string {
	return rq("HEAD "+path+" HTTP/1.1", append([]string{"Host: x"}, fields...), "")
}

// post is a POST of body with its Content-Length.
func post(path, body string, fields ...string) string {
	return rq("POST "+path+" HTTP/1.1", append([]string{"Host: x", "Content-Length: " + strconv.Itoa(len(body))}, fields...), body)
}

// chunked is a POST of chunks, chunked, with the trailer fields given.
func chunked(path string, chunks []string, trailer []string, fields ...string) string {
	var b strings.Builder
	for _, c := range chunks {
		fmt.Fprintf(&b, "%x\r\n%s\r\n", len(c), c)
	}
	b.WriteString("0\r\n")
	for _, f := range trailer {
		b.WriteString(f + "\r\n")
	}
	b.WriteString("\r\n")
	return rq("POST "+path+" HTTP/1.1", append([]string{"Host: x", "Transfer-Encoding: chunked"}, fields...), b.String())
}

func multipartBody() (body, contentType string) {
	var b strings.Builder
	mw := multipart.NewWriter(&b)
	mw.SetBoundary("suiteboundary")
	mw.WriteField("name", "gopher")
	mw.WriteField("name", "again")
	fw, _ := mw.CreateFormFile("upload", "a.txt")
	io.WriteString(fw, "file contents")
	mw.Close()
	return b.String(), mw.FormDataContentType()
}

// TestParityWriteTimeoutContinue: a 100 Continue due after WriteTimeout
// has passed is not sent (net/http's write of it fails), nor is the
// response; the connection closes.
func TestParityWriteTimeoutContinue(t *testing.T) {
	t.Parallel()
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(700 * time.Millisecond)
		b, err := io.ReadAll(r.Body)
		fmt.Fprintf(w, "read %q %v", b, err)
	})
	plain, _ := suiteServers(t, h, func(std *http.Server, ours *httpd.Server) {
		std.WriteTimeout, ours.WriteTimeout = 500*time.Millisecond, 500*time.Millisecond
	})
	c := suiteCase{parityCase: parityCase{name: "late 100 Continue",
		raw: rq("POST /x HTTP/1.1", []string{"Host: x", "Content-Length: 5", "Expect: 100-continue"}, await+"hello")}}
	runs := wireRuns([]suiteCase{c}, plain, "")
	runWire(runs)
	for _, r := range runs {
		if r.diff != "" {
			t.Errorf("%s: %s", r.name, r.diff)
		}
	}
}
