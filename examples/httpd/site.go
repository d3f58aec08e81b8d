package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"log"
	"net/http"
	"strconv"
	"time"
)

//go:embed static
var staticFiles embed.FS

// Limits on what a query may ask for: a request names a size, and the
// server must not be talked into serving forever.
const (
	maxStreamLines   = 1000
	maxDownloadBytes = 16 << 30
	// echoBodyMax is the longest body /api/echo returns in its JSON; a
	// longer one is only counted and hashed, so that any size streams
	// through in constant memory.
	echoBodyMax = 4 << 10
)

// newMux returns the site's handler: every route of the package doc on
// an http.ServeMux with Go 1.22 method and wildcard patterns.
func newMux() *http.ServeMux {
	mux := http.NewServeMux()
	// A template, not a file served as is: the page names the protocol
	// its own request came over.
	index := template.Must(template.ParseFS(staticFiles, "static/index.html"))
	// "/{$}" is the root alone; other unknown paths get the mux's 404
	// instead of the page.
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		// Executed into a buffer first: a template error must not leave
		// half a page behind a 200.
		var b bytes.Buffer
		if err := index.Execute(&b, pageData{Proto: r.Proto}); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Write(b.Bytes())
	})
	// The embedded tree is rooted at "static", so /static/style.css maps
	// to its file without stripping a prefix.
	mux.Handle("GET /static/", http.FileServerFS(staticFiles))
	mux.HandleFunc("GET /api/time", apiTime)
	mux.HandleFunc("POST /api/echo", apiEcho)
	mux.HandleFunc("GET /stream", stream)
	mux.HandleFunc("GET /download", download)
	mux.HandleFunc("PUT /upload", upload)
	mux.HandleFunc("POST /upload", upload)
	mux.HandleFunc("GET /plaintext", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		io.WriteString(w, "Hello, World!")
	})
	mux.HandleFunc("GET /json", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, struct {
			Message string `json:"message"`
		}{"Hello, World!"})
	})
	return mux
}

// writeJSON answers v as JSON with status code.
func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	// The status is out: an encoding error can only cut the body short.
	json.NewEncoder(w).Encode(v)
}

// pageData fills in static/index.html.
type pageData struct {
	Proto string // the page request's, "HTTP/1.1" or "HTTP/2.0"
}

// timeReply is /api/time's answer.
type timeReply struct {
	Time   time.Time `json:"time"`
	UnixMS int64     `json:"unix_ms"`
	// Proto is the request's protocol: the page's script shows it, so a
	// browser's choice of HTTP/2 for its fetches can be seen.
	Proto string `json:"proto"`
}

func apiTime(w http.ResponseWriter, r *http.Request) {
	now := time.Now()
	writeJSON(w, http.StatusOK, timeReply{Time: now, UnixMS: now.UnixMilli(), Proto: r.Proto})
}

// echoReply is /api/echo's answer.
type echoReply struct {
	Length int64  `json:"length"`
	SHA256 string `json:"sha256"`
	// Body is the body itself if it is at most echoBodyMax bytes.
	Body *string `json:"body,omitempty"`
}

// capWriter keeps the first max bytes written to it and counts the rest.
type capWriter struct {
	buf []byte
	max int
}

func (c *capWriter) Write(p []byte) (int, error) {
	if room := c.max + 1 - len(c.buf); room > 0 {
		// One byte beyond max tells "exactly max" from "longer".
		c.buf = append(c.buf, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

// apiEcho hashes the body as it arrives: a 20 MiB POST costs the copy
// buffer, not 20 MiB.
func apiEcho(w http.ResponseWriter, r *http.Request) {
	sum := sha256.New()
	head := &capWriter{max: echoBodyMax}
	n, err := io.Copy(io.MultiWriter(sum, head), r.Body)
	if err != nil {
		http.Error(w, "reading the body: "+err.Error(), http.StatusBadRequest)
		return
	}
	reply := echoReply{Length: n, SHA256: hex.EncodeToString(sum.Sum(nil))}
	if len(head.buf) <= echoBodyMax {
		s := string(head.buf)
		reply.Body = &s
	}
	writeJSON(w, http.StatusOK, reply)
}

// queryInt parses the query parameter name as an integer in [0, max],
// def if absent.
func queryInt(r *http.Request, name string, def, max int64) (int64, error) {
	s := r.URL.Query().Get(name)
	if s == "" {
		return def, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 || n > max {
		return 0, fmt.Errorf("%s must be an integer from 0 to %d", name, max)
	}
	return n, nil
}

// stream sends n server-sent events 100 ms apart, flushing each, so a
// client (curl -N, EventSource) sees them arrive one by one rather than
// together at the end.
func stream(w http.ResponseWriter, r *http.Request) {
	n, err := queryInt(r, "n", 10, maxStreamLines)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	flusher, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for i := range n {
		if i > 0 {
			select {
			case <-tick.C:
			case <-r.Context().Done():
				return
			}
		}
		if _, err := fmt.Fprintf(w, "id: %d\ndata: line %d of %d at %s\n\n", i+1, i+1, n, time.Now().Format(time.RFC3339Nano)); err != nil {
			return // the client left
		}
		flusher.Flush()
	}
}

// pattern is an endless reader of a known byte sequence (byte i is
// i mod 251, a prime, so the sequence does not line up with any power of
// two buffer) that a client can check a download against.
// It ends with ctx's error once ctx is done: a handler copying gigabytes
// stops when the request is cancelled (the client left, or the server's
// shutdown gave up waiting) instead of when the copy is over.
type pattern struct {
	ctx context.Context
	off int64
}

// patternTable holds the sequence from every phase: Read copies from it
// rather than computing byte by byte, so that a download of gigabytes
// costs memmove's time.
var patternTable = func() []byte {
	b := make([]byte, 251+64<<10)
	for i := range b {
		b[i] = byte(i % 251)
	}
	return b
}()

func (p *pattern) Read(b []byte) (int, error) {
	if err := p.ctx.Err(); err != nil {
		return 0, err
	}
	n := 0
	for n < len(b) {
		n += copy(b[n:], patternTable[(p.off+int64(n))%251:])
	}
	p.off += int64(n)
	return n, nil
}

// download streams size bytes of the pattern with io.Copy: the response
// is never held in memory, however large.
func download(w http.ResponseWriter, r *http.Request) {
	size, err := queryInt(r, "size", 1<<20, maxDownloadBytes)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
	w.Header().Set("Content-Disposition", `attachment; filename="pattern.bin"`)
	io.Copy(w, io.LimitReader(&pattern{ctx: r.Context()}, size))
}

// uploadReply is /upload's answer.
type uploadReply struct {
	Bytes int64 `json:"bytes"`
}

func upload(w http.ResponseWriter, r *http.Request) {
	n, err := io.Copy(io.Discard, r.Body)
	if err != nil {
		http.Error(w, fmt.Sprintf("after %d bytes: %v", n, err), http.StatusBadRequest)
		return
	}
	writeJSON(w, http.StatusOK, uploadReply{Bytes: n})
}

// logRequests is the -v middleware: it logs each request once its
// handler returns.
func logRequests(l *log.Logger, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		next.ServeHTTP(sw, r)
		l.Printf("%s %s %s %d %dB %v", r.RemoteAddr, r.Method, r.URL.RequestURI(), sw.status(), sw.bytes, time.Since(start).Round(time.Microsecond))
	})
}

// statusWriter records the status and size of a response. It passes
// Flush on (the /stream handler asserts http.Flusher) and unwraps for
// http.ResponseController, so a middleware does not take features away
// from the handlers under it.
type statusWriter struct {
	http.ResponseWriter
	code  int
	bytes int64
}

func (s *statusWriter) WriteHeader(code int) {
	if s.code == 0 && code >= 200 {
		s.code = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(p []byte) (int, error) {
	if s.code == 0 {
		s.code = http.StatusOK
	}
	n, err := s.ResponseWriter.Write(p)
	s.bytes += int64(n)
	return n, err
}

func (s *statusWriter) Flush() {
	if s.code == 0 {
		s.code = http.StatusOK
	}
	http.NewResponseController(s.ResponseWriter).Flush()
}

func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// status is the response's status, 200 if the handler set none.
func (s *statusWriter) status() int {
	if s.code == 0 {
		return http.StatusOK
	}
	return s.code
}
