//go:build linux

package httpd_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/gracepoll/gracepoll/httpd"
)

// TestParityHeaderSnapshot: the header is snapshotted at WriteHeader, as
// in net/http (ResponseWriter.Header's doc); changes after it are not
// sent, but trailers are.
func TestParityHeaderSnapshot(t *testing.T) {
	runParity(t, []parityCase{
		{name: "set after WriteHeader", raw: getReq, handler: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Before", "1")
			w.WriteHeader(200)
			w.Header().Set("X-After", "1")
			io.WriteString(w, "hi")
		}},
		{name: "set after WriteHeader, no header before", raw: getReq, handler: func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(200)
			w.Header().Set("X-After", "1")
			io.WriteString(w, "hi")
		}},
		{name: "content-type after Write", raw: getReq, handler: func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, "<html><body>hi</body></html>")
			w.Header().Set("Content-Type", "application/json")
		}},
		{name: "content-length after WriteHeader, pipelined", raw: getReq + getReq, handler: func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(200)
			w.Header().Set("Content-Length", "3")
			io.WriteString(w, "hello")
		}},
		{name: "deleted after WriteHeader", raw: getReq, handler: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Keep", "1")
			w.WriteHeader(201)
			w.Header().Del("X-Keep")
			w.Write([]byte("hi"))
		}},
		{name: "trailer prefix after small body", raw: getReq, handler: func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, "hi")
			w.Header().Set(http.TrailerPrefix+"X-T", "v")
		}},
		{name: "header after a large body", raw: getReq, handler: func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, strings.Repeat("a", 3000))
			w.Header().Set("X-After", "1")
			io.WriteString(w, "b")
		}},
	})
}

// TestParityTrailers: declared trailers (the Trailer field or
// http.TrailerPrefix) end a chunked body, small or not.
func TestParityTrailers(t *testing.T) {
	runParity(t, []parityCase{
		{name: "declared, small body", raw: getReq + getReq, handler: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Trailer", "X-T")
			io.WriteString(w, "hi")
			w.Header().Set("X-T", "v")
		}},
		{name: "declared, no body", raw: getReq, handler: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Trailer", "X-T, X-U")
			w.Header().Set("X-T", "v")
		}},
		{name: "prefix, small body", raw: getReq + getReq, handler: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set(http.TrailerPrefix+"X-T", "v")
			io.WriteString(w, "hi")
		}},
		{name: "declared, value set before the head", raw: getReq, handler: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Trailer", "X-T")
			w.Header().Set("X-T", "early")
			io.WriteString(w, "hi")
			w.Header().Set("X-T", "late")
		}},
		{name: "declared, flushed", raw: getReq, handler: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Trailer", "X-T")
			io.WriteString(w, "hi")
			w.(http.Flusher).Flush()
			w.Header().Set("X-T", "v")
		}},
	})
}

// TestParityInformational: a 1xx carries the header as it is, but no
// Content-Length or Transfer-Encoding (RFC 9110 section 8.6).
func TestParityInformational(t *testing.T) {
	runParity(t, []parityCase{
		{name: "103 after content-length", raw: getReq, handler: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Link", "</a.css>; rel=preload")
			w.Header().Set("Content-Length", "2")
			w.WriteHeader(http.StatusEarlyHints)
			io.WriteString(w, "hi")
		}},
		{name: "103 after transfer-encoding", raw: getReq, handler: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Link", "</a.css>; rel=preload")
			w.Header().Set("Transfer-Encoding", "chunked")
			w.WriteHeader(http.StatusEarlyHints)
			w.Header().Del("Transfer-Encoding")
			io.WriteString(w, "hi")
		}},
	})
}

// TestParityRefusals: httpd's own refusals carry a Date (RFC 9110
// section 6.6.1). net/http writes most of its refusals without one, so
// the Date is checked on httpd alone; a 417, which net/http answers as a
// response, is compared.
func TestParityRefusals(t *testing.T) {
	runParity(t, []parityCase{
		{name: "417", raw: "GET / HTTP/1.1\r\nHost: x\r\nExpect: foo\r\n\r\n",
			ignore: []string{"Content-Length", "Content-Type"}, ignoreBody: true, handler: hello},
	})
	srv := &httpd.Server{Handler: http.HandlerFunc(hello), MaxBodyBytes: 10}
	addr := serve(t, srv)
	for _, c := range []struct {
		raw    string
		status string
	}{
		{"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n", "400"},
		{"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 11\r\n\r\n", "413"},
		{"GET /" + strings.Repeat("a", 9000) + " HTTP/1.1\r\nHost: x\r\n\r\n", "414"},
		{"GET / HTTP/1.1\r\nHost: x\r\nExpect: foo\r\n\r\n", "417"},
		{"GET / HTTP/1.1\r\nHost: x\r\n" + strings.Repeat("X-A: b\r\n", 200) + "\r\n", "431"},
		{"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", "505"},
	} {
		x := exchange(t, addr, c.raw)
		if len(x.Resps) != 1 || !strings.HasPrefix(x.Resps[0].Status, "HTTP/1.1 "+c.status+" ") {
			t.Errorf("%.40q: got\n%v\nwant one %s", c.raw, x, c.status)
			continue
		}
		if h := x.Resps[0].Header; h.Get("Date") == "" || h.Get("Connection") != "close" || !x.Closed {
			t.Errorf("%.40q: got\n%v\nwant a Date and Connection: close, and the connection closed", c.raw, x)
		}
	}
}

// TestParityTransferEncoding: a handler's Transfer-Encoding decides the
// framing as in net/http: chunked is chunked, identity a body ended by
// the connection's close, and a Content-Length with them is dropped.
func TestParityTransferEncoding(t *testing.T) {
	te := func(v, cl string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Transfer-Encoding", v)
			if cl != "" {
				w.Header().Set("Content-Length", cl)
			}
			io.WriteString(w, "hello")
		}
	}
	get10 := "GET / HTTP/1.0\r\nHost: x\r\n\r\n"
	head := "HEAD / HTTP/1.1\r\nHost: x\r\n\r\n"
	runParity(t, []parityCase{
		{name: "chunked", raw: getReq + getReq, handler: te("chunked", "")},
		{name: "chunked, content-length", raw: getReq + getReq, handler: te("chunked", "5")},
		{name: "chunked, HTTP/1.0", raw: get10, handler: te("chunked", ""), ignoreVersion: true, ignore: []string{"Connection"}},
		{name: "chunked, HEAD", raw: head + getReq, handler: te("chunked", "")},
		{name: "identity", raw: getReq + getReq, handler: te("identity", "")},
		{name: "identity, content-length", raw: getReq + getReq, handler: te("identity", "5")},
		{name: "gzip", raw: getReq, handler: te("gzip", "")},
		{name: "chunked, 204", raw: getReq + getReq, handler: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Transfer-Encoding", "chunked")
			w.WriteHeader(http.StatusNoContent)
		}},
		{name: "304 content-type", raw: getReq + getReq, handler: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/html")
			w.Header().Set("Etag", `"x"`)
			w.WriteHeader(http.StatusNotModified)
		}},
	})
}

// TestParityHead: a HEAD's body is sniffed for a Content-Type and
// counted for a Content-Length as a GET's, and not sent.
func TestParityHead(t *testing.T) {
	head := "HEAD / HTTP/1.1\r\nHost: x\r\n\r\n"
	html := "<html><body>" + strings.Repeat("hi ", 1500) + "</body></html>"
	runParity(t, []parityCase{
		{name: "small", raw: head + getReq, handler: func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, "<html><body>hi</body></html>")
		}},
		{name: "small, bytes", raw: head + head, handler: func(w http.ResponseWriter, r *http.Request) {
			w.Write([]byte("\x89PNG\r\n\x1a\nxxxx"))
		}},
		{name: "large", raw: head + getReq, handler: func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, html)
		}},
		{name: "nothing", raw: head + getReq, handler: func(w http.ResponseWriter, r *http.Request) {}},
		{name: "content-length", raw: head + getReq, handler: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", "5")
			io.WriteString(w, "hello")
		}},
	})
}

// TestParitySniff: the Content-Type is sniffed from the first 512 bytes
// written, over several writes.
func TestParitySniff(t *testing.T) {
	html := "<html><body>" + strings.Repeat("hi ", 1500) + "</body></html>"
	runParity(t, []parityCase{
		{name: "newline then html", raw: getReq + getReq, handler: func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, "\n")
			io.WriteString(w, html)
		}},
		{name: "spaces then html", raw: getReq, handler: func(w http.ResponseWriter, r *http.Request) {
			w.Write([]byte(strings.Repeat(" ", 600)))
			w.Write([]byte(html))
		}},
		{name: "small writes", raw: getReq, handler: func(w http.ResponseWriter, r *http.Request) {
			for _, s := range []string{"<", "html", ">", "<body>hi</body></html>"} {
				io.WriteString(w, s)
			}
		}},
		{name: "flushed before", raw: getReq, handler: func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, "\n")
			w.(http.Flusher).Flush()
			io.WriteString(w, html)
		}},
		{name: "content-encoding", raw: getReq, handler: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Encoding", "gzip")
			io.WriteString(w, html)
		}},
	})
}

// TestParityHeaderHeldMap: the snapshot is taken at WriteHeader, also for
// a handler that keeps the map Header returned before it.
func TestParityHeaderHeldMap(t *testing.T) {
	runParity(t, []parityCase{
		{name: "held map", raw: getReq + getReq, handler: func(w http.ResponseWriter, r *http.Request) {
			h := w.Header()
			h.Set("X-Before", "1")
			w.WriteHeader(200)
			h.Set("X-After", "1")
			h.Add("X-Before", "2")
			h.Set("Content-Length", "1")
			io.WriteString(w, "hello")
		}},
		{name: "held map, implicit WriteHeader", raw: getReq, handler: func(w http.ResponseWriter, r *http.Request) {
			h := w.Header()
			h.Set("X-Before", "1")
			io.WriteString(w, "<html>")
			h.Set("Content-Type", "application/json")
			h.Del("X-Before")
		}},
	})
}

// TestParityInvalidContentLength: an invalid Content-Length is dropped
// and the body framed as if none was set (chunked: net/http's snapshot
// keeps the field, so no Content-Length of its own is added).
func TestParityInvalidContentLength(t *testing.T) {
	cl := func(v string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", v)
			io.WriteString(w, "hi")
		}
	}
	runParity(t, []parityCase{
		{name: "abc", raw: getReq + getReq, handler: cl("abc")},
		{name: "-1", raw: getReq + getReq, handler: cl("-1")},
		// net/http sends "Content-Length: abc" to a HEAD; httpd leaves
		// it out, and adds none either.
		{name: "HEAD", raw: "HEAD / HTTP/1.1\r\nHost: x\r\n\r\n" + getReq, handler: cl("abc"), ignore: []string{"Content-Length"}},
	})
}

func TestHeadInvalidContentLength(t *testing.T) {
	_, ours := parity(t, parityCase{raw: "HEAD / HTTP/1.1\r\nHost: x\r\n\r\n", handler: func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "abc")
		io.WriteString(w, "hi")
	}})
	if len(ours.Resps) != 1 || ours.Resps[0].Header["Content-Length"] != nil {
		t.Errorf("got\n%v\nwant no Content-Length", ours)
	}
}

// TestParityConnectionField: a handler's Connection field is replaced by
// "close" when the connection closes after the response.
func TestParityConnectionField(t *testing.T) {
	runParity(t, []parityCase{
		{name: "keep-alive, request close", raw: "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", handler: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Connection", "keep-alive")
			io.WriteString(w, "hi")
		}},
		{name: "close", raw: getReq + getReq, handler: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Connection", "close")
			io.WriteString(w, "hi")
		}},
		{name: "keep-alive", raw: getReq + getReq, handler: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Connection", "keep-alive")
			io.WriteString(w, "hi")
		}},
	})
}
