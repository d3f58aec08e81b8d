//go:build linux

package peers

import (
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/valyala/fasthttp"

	"github.com/gracepoll/gracepoll/httpd"
)

// The HTTP/2 comparison's routes beyond HTTPHandler's: a large response
// and a large request body, for the transfer benchmark (one stream
// carrying a gigabyte, where a server that buffers shows in its RSS).
const (
	// DownloadPath answers GET DownloadPath?bytes=N with N bytes of
	// TransferPattern, application/octet-stream, Content-Length N.
	DownloadPath = "/download"
	// UploadPath answers POST UploadPath by reading the whole body
	// and replying "received N" (text/plain), N the bytes read.
	UploadPath = "/upload"
	// maxDownload bounds /download's N: a typo in a benchmark must not
	// have a server stream for hours.
	maxDownload = 1 << 40
)

// transferBlock is the pattern /download repeats, byte i being i mod 251
// (a prime, so that the pattern does not line up with any power-of-two
// buffer or frame size and a byte delivered twice or skipped shows), its
// length a multiple of 251 so that every copy continues the sequence.
var transferBlock = func() []byte {
	b := make([]byte, 251*256)
	for i := range b {
		b[i] = byte(i % 251)
	}
	return b
}()

// TransferPattern returns the pattern's bytes from offset off on, for at
// most n bytes (fewer near the end of a block): what /download sends at
// off. A reader compares what it got against it.
func TransferPattern(off int64, n int) []byte {
	i := int(off % 251)
	return transferBlock[i : i+min(n, len(transferBlock)-i)]
}

// CheckTransfer reports whether p is the pattern from offset off on.
func CheckTransfer(p []byte, off int64) bool {
	for len(p) > 0 {
		want := TransferPattern(off, len(p))
		if !bytes.Equal(p[:len(want)], want) {
			return false
		}
		p, off = p[len(want):], off+int64(len(want))
	}
	return true
}

// H2Handler is HTTPHandler with the transfer routes, DownloadPath and
// UploadPath: the handler of the HTTP/2 servers on httpd and net/http,
// one value for both, as HTTPHandler is for HTTP/1.1.
type H2Handler struct{ HTTPHandler }

// ServeHTTP answers one request (see H2Handler).
func (h H2Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case DownloadPath:
		n, err := strconv.ParseInt(strings.TrimPrefix(r.URL.RawQuery, "bytes="), 10, 64)
		if r.Method != http.MethodGet || !strings.HasPrefix(r.URL.RawQuery, "bytes=") || err != nil || n < 0 || n > maxDownload {
			http.Error(w, "want GET ?bytes=N", http.StatusBadRequest)
			return
		}
		hd := w.Header()
		hd["Content-Type"] = []string{"application/octet-stream"}
		hd["Content-Length"] = []string{strconv.FormatInt(n, 10)}
		// Whole blocks: every write continues the pattern (its
		// length is a multiple of 251), as a file server's reads do.
		for n > 0 {
			p := transferBlock[:min(n, int64(len(transferBlock)))]
			if _, err := w.Write(p); err != nil {
				return
			}
			n -= int64(len(p))
		}
	case UploadPath:
		if r.Method != http.MethodPost {
			http.Error(w, "want POST", http.StatusMethodNotAllowed)
			return
		}
		// Counted, not checked: the server's cost is the transport's,
		// and the client checks the count.
		n, err := io.CopyBuffer(io.Discard, r.Body, make([]byte, 64<<10))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Header()["Content-Type"] = plainType
		fmt.Fprintf(w, "received %d", n)
	default:
		h.HTTPHandler.ServeHTTP(w, r)
	}
}

// h2cProtocols are the protocols of the h2c servers: HTTP/1 and HTTP/2
// with prior knowledge on plain connections, as net/http spells it.
func h2cProtocols() *http.Protocols {
	p := new(http.Protocols)
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	return p
}

// NewHTTPDH2C starts httpd serving H2Handler over HTTP/1.1 and h2c with
// prior knowledge (Server.Protocols), its other options the defaults.
func NewHTTPDH2C() (Server, error) {
	return startHTTPDServer(&httpd.Server{Handler: H2Handler{}, Protocols: h2cProtocols()})
}

// NewHTTPDH2 starts httpd serving H2Handler over TLS with its default
// protocols: HTTP/2 negotiated by ALPN, HTTP/1.1 otherwise.
func NewHTTPDH2(c Cert) (Server, error) {
	cfg, err := c.ServerConfig()
	if err != nil {
		return nil, err
	}
	return startHTTPDServer(&httpd.Server{Handler: H2Handler{}, TLSConfig: cfg})
}

// startHTTPDServer starts srv on 127.0.0.1, on a free port, as an HTTPD
// (whose poller and counters the launcher reports).
func startHTTPDServer(srv *httpd.Server) (Server, error) {
	ln, err := listenLoopback()
	if err != nil {
		return nil, err
	}
	s := &HTTPD{srv: srv, addr: ln.Addr().String()}
	go s.srv.Serve(ln)
	return s, nil
}

// NewNetHTTPH2C starts net/http serving H2Handler over HTTP/1.1 and h2c
// with prior knowledge (http.Server.Protocols).
func NewNetHTTPH2C() (Server, error) {
	ln, err := listenLoopback()
	if err != nil {
		return nil, err
	}
	s := &NetHTTP{srv: &http.Server{Handler: H2Handler{}, Protocols: h2cProtocols()}, addr: ln.Addr().String()}
	go s.srv.Serve(ln)
	return s, nil
}

// NewNetHTTPH2 starts net/http serving H2Handler over TLS as a
// production server does, ServeTLS with the certificate in TLSConfig:
// ServeTLS adds "h2" and "http/1.1" to the configuration's ALPN
// protocols, and HTTP/2 is net/http's own (its bundled x/net/http2).
func NewNetHTTPH2(c Cert) (Server, error) {
	cfg, err := c.ServerConfig()
	if err != nil {
		return nil, err
	}
	ln, err := listenLoopback()
	if err != nil {
		return nil, err
	}
	s := &NetHTTP{srv: &http.Server{Handler: H2Handler{}, TLSConfig: cfg}, addr: ln.Addr().String()}
	go s.srv.ServeTLS(ln, "", "")
	return s, nil
}

// NewFastHTTPTLS starts fasthttp (fastHTTPHandler, HTTP/1.1 only: it has
// no HTTP/2) behind crypto/tls's listener serving c, with the
// configuration every crypto/tls server here uses: the HTTP/1.1
// reference of the HTTP/2 benchmark's TLS cells.
func NewFastHTTPTLS(c Cert) (Server, error) {
	cfg, err := c.ServerConfig()
	if err != nil {
		return nil, err
	}
	ln, err := listenLoopback()
	if err != nil {
		return nil, err
	}
	tln := tls.NewListener(ln, cfg)
	s := &FastHTTP{srv: &fasthttp.Server{Handler: fastHTTPHandler}, ln: tln, done: make(chan error, 1)}
	go func() { s.done <- s.srv.Serve(tln) }()
	return s, nil
}
