package httpd

import (
	"context"
	"errors"
	"io"
	"maps"
	"net"
	"net/http"
	"net/textproto"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gracepoll/gracepoll/internal/h1"
)

// newRequest builds the *http.Request a handler gets for a parsed head,
// as net/http's server builds it. Its context (reqCtx) is the server's,
// cancelled when the handler returns.
func (hc *hconn) newRequest(req *h1.Request) (*http.Request, error) {
	// The target and the host in one string: one allocation.
	var small [256]byte
	both := string(append(append(small[:0], req.Target...), req.Authority...))
	target, host := both[:len(req.Target)], both[len(req.Target):]
	var u *url.URL
	if req.Form == h1.AuthorityForm {
		u = &url.URL{Host: target}
	} else {
		var err error
		if u, err = url.ParseRequestURI(target); err != nil {
			return nil, h1.ErrBadTarget
		}
	}
	ctx := &reqCtx{parent: hc.h.ctx, hc: hc}
	r0 := http.Request{
		Method:        method(req.Method),
		URL:           u,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    req.Minor,
		Header:        req.Header(),
		Host:          host,
		RequestURI:    target,
		RemoteAddr:    hc.remoteAddr(),
		ContentLength: max(req.ContentLength, 0),
		Close:         req.Close,
	}
	switch req.Minor {
	case 0:
		r0.Proto = "HTTP/1.0"
	case 1:
	default:
		r0.Proto = "HTTP/1." + string(rune('0'+req.Minor))
	}
	if req.Chunked {
		r0.ContentLength = -1
		r0.TransferEncoding = []string{"chunked"}
		if names, ok := r0.Header["Trailer"]; ok {
			// As net/http: the declared trailers are Trailer's keys,
			// their values set once the body has been read.
			delete(r0.Header, "Trailer")
			var err error
			if r0.Trailer, err = declaredTrailers(names); err != nil {
				return nil, err
			}
		}
	}
	if cs, ok := hc.c.ConnectionState(); ok {
		tlsState := cs // only a TLS request's state goes to the heap
		r0.TLS = &tlsState
	}
	r := r0.WithContext(ctx)
	ctx.req = r
	return r, nil
}

// errBadTrailer refuses a request whose Trailer field names a field that
// frames the message, as net/http does.
var errBadTrailer = &statusError{400, "httpd: Trailer names a framing field"}

// declaredTrailers returns the fields a chunked request's Trailer field
// names, as keys of a header with nil values; nil if it names none.
func declaredTrailers(names []string) (http.Header, error) {
	var h http.Header
	for _, v := range names {
		for _, k := range strings.Split(v, ",") {
			if k = strings.TrimSpace(k); k == "" {
				continue
			}
			k = http.CanonicalHeaderKey(k)
			switch k {
			case "Transfer-Encoding", "Trailer", "Content-Length":
				return nil, errBadTrailer
			}
			if h == nil {
				h = make(http.Header)
			}
			h[k] = nil
		}
	}
	return h, nil
}

// trailerHeader returns trailer fields as net/http's server sets them in
// Request.Trailer once the body is read: canonical keys, values in
// order, whatever the Trailer field declared; nil if there are none.
func trailerHeader(fields []h1.Field) http.Header {
	if len(fields) == 0 {
		return nil
	}
	h := make(http.Header, len(fields))
	for _, f := range fields {
		k := textproto.CanonicalMIMEHeaderKey(string(f.Name))
		h[k] = append(h[k], string(f.Value))
	}
	return h
}

// setTrailers merges the trailers received into r.Trailer, as net/http
// does when the body's reader meets its end.
func setTrailers(r *http.Request, t http.Header) {
	if r.Trailer == nil {
		r.Trailer = t
		return
	}
	maps.Copy(r.Trailer, t)
}

// method returns m as a string, without allocating for the common ones.
func method(m []byte) string {
	switch string(m) {
	case "GET":
		return "GET"
	case "POST":
		return "POST"
	case "HEAD":
		return "HEAD"
	case "PUT":
		return "PUT"
	case "DELETE":
		return "DELETE"
	case "OPTIONS":
		return "OPTIONS"
	case "PATCH":
		return "PATCH"
	}
	return string(m)
}

// remoteAddr is the client's address as a string, asked of the kernel
// once per connection.
func (hc *hconn) remoteAddr() string {
	if hc.remote == "" {
		if a := hc.c.RemoteAddr(); a != nil {
			hc.remote = a.String()
		}
	}
	return hc.remote
}

// localAddr is the connection's local address, asked of the kernel on
// first use and kept, so that it outlives the connection as net/http's
// does. A handler's goroutines may ask at once.
func (hc *hconn) localAddr() net.Addr {
	if a, ok := hc.local.Load().(net.Addr); ok {
		return a
	}
	a := hc.c.LocalAddr()
	if a != nil {
		hc.local.Store(a)
	}
	return a
}

// reqCtx is a request's context: the server's (the BaseContext,
// cancelled by Close), cancelled itself when its handler returns, when
// its connection ends before that, and when Shutdown gives up. Its
// channel and its link to the server's context are made only if a
// handler asks for Done: a request whose handler never waits on its
// context costs one small allocation for it.
type reqCtx struct {
	parent context.Context
	req    *http.Request
	hc     *hconn

	mu   sync.Mutex
	done chan struct{}
	stop func() bool // unlinks it from parent
	err  error
	set  atomic.Bool // err is set
}

func (c *reqCtx) Deadline() (time.Time, bool) { return c.parent.Deadline() }

// Value answers net/http's per-connection keys as its server does, and
// asks the server's context for the rest. http.ServerContextKey's value
// is the *httpd.Server: there is no *http.Server to give.
func (c *reqCtx) Value(key any) any {
	switch key {
	case http.LocalAddrContextKey:
		return c.hc.localAddr()
	case http.ServerContextKey:
		return c.hc.h.srv
	}
	return c.parent.Value(key)
}

func (c *reqCtx) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done == nil {
		c.done = make(chan struct{})
		if c.err != nil {
			close(c.done)
		} else {
			c.stop = context.AfterFunc(c.parent, func() { c.cancel(context.Cause(c.parent)) })
		}
	}
	return c.done
}

func (c *reqCtx) Err() error {
	if c.set.Load() {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.err
	}
	return c.parent.Err()
}

// cancel cancels the context with err (context.Canceled if nil), once.
func (c *reqCtx) cancel(err error) {
	if err == nil {
		err = context.Canceled
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return
	}
	if !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		err = context.Canceled
	}
	c.err = err
	c.set.Store(true)
	if c.done != nil {
		close(c.done)
	}
	if c.stop != nil {
		c.stop()
	}
}

func (c *reqCtx) String() string { return "httpd.requestContext" }

// bufBody is the body of a request that arrived whole before its handler
// ran (the connection's input, or a decoded chunked body): reads never
// wait. It is valid until the handler returns.
type bufBody struct {
	b      []byte
	closed atomic.Bool
	// A chunked body's trailers, set in req.Trailer when a read
	// meets the body's end.
	trailer http.Header
	req     *http.Request
}

// end sets the trailers once the body has been read.
func (b *bufBody) end() {
	if b.trailer != nil {
		setTrailers(b.req, b.trailer)
		b.trailer = nil
	}
}

func (b *bufBody) Read(p []byte) (int, error) {
	if b.closed.Load() {
		return 0, http.ErrBodyReadAfterClose
	}
	if len(b.b) == 0 {
		b.end()
		return 0, io.EOF
	}
	n := copy(p, b.b)
	b.b = b.b[n:]
	if len(b.b) == 0 && n > 0 {
		// The last bytes come with io.EOF, as net/http's body returns
		// them once nothing is left to read.
		b.end()
		return n, io.EOF
	}
	return n, nil
}

func (b *bufBody) Close() error { b.close(); return nil }

func (b *bufBody) close() { b.closed.Store(true) }

// WriteTo lets io.Copy skip its buffer.
func (b *bufBody) WriteTo(w io.Writer) (int64, error) {
	if b.closed.Load() {
		return 0, http.ErrBodyReadAfterClose
	}
	n, err := w.Write(b.b)
	b.b = b.b[n:]
	if len(b.b) == 0 {
		b.end()
	}
	return int64(n), err
}
