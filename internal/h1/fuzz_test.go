package h1

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"net/http/httputil"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// FuzzRequest parses each input with Request.Parse and with net/http's
// ReadRequest. Whenever both accept the head, they must mean the same
// request (the normalisations are commented where they are made). Where
// only net/http accepts, this package is stricter, as its doc lists: bare
// LF, obs-fold, whitespace before the colon, Content-Length with
// Transfer-Encoding, Transfer-Encoding in HTTP/1.0, a missing Host (which
// ReadRequest leaves to net/http's server), raw non-ASCII, "#" or bad
// escapes in the target, a target form the method does not take, schemes
// other than http and https, HTTP/0.x and HTTP/2: no failure. Where only
// this package accepts, the input must be a case leniencyOf names, else
// the fuzzer has found a disagreement.
//
// It also checks that parsing in two pieces, each in its own buffer, gives
// what parsing whole gives.
func FuzzRequest(f *testing.F) {
	for _, tt := range validHeads {
		f.Add([]byte(tt.in))
	}
	for _, tt := range invalidHeads {
		f.Add([]byte(tt.in))
	}
	for _, s := range []string{
		"HEAD /index.html HTTP/1.1\r\nHost: example.com\r\nUser-Agent: wrk\r\nAccept: */*\r\n\r\n",
		"POST /upload HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
		"POST /a HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\nabcGET /b HTTP/1.1\r\nHost: h\r\n\r\n",
		"GET /a HTTP/1.1\r\nHost: h\r\n\r\nGET /b HTTP/1.1\r\nHost: h\r\n\r\n",
		"GET / HTTP/1.0\r\nHost: h\r\nConnection: keep-alive, close\r\n\r\n",
		"GET /p?a=1&b=%20 HTTP/1.1\r\nHost: [::1]:80\r\nCookie: a=b; c=d\r\nCookie: e=f\r\n\r\n",
		"GET http://h/a/../b HTTP/1.1\r\nHost: h\r\n\r\n",
		"OPTIONS * HTTP/1.0\r\n\r\n",
		"CONNECT [::1]:443 HTTP/1.1\r\nHost: [::1]:443\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: h\r\nPragma: no-cache\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 00\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var r Request
		n, err := r.Parse(data, Limits{})
		checkSplit(t, data, n, err, &r)
		if err == ErrIncomplete {
			return // no verdict yet: the client has not finished
		}

		// Normalisation: this package skips CRLFs before the request line
		// (RFC 9112 section 2.2); net/http's ReadRequest does not (its
		// server does after a POST).
		lead := 0
		for bytes.HasPrefix(data[lead:], []byte("\r\n")) {
			lead += 2
		}
		rd := bytes.NewReader(data[lead:])
		br := bufio.NewReader(rd)
		req, herr := http.ReadRequest(br)
		switch {
		case err != nil && herr != nil:
			return
		case err != nil:
			// Stricter than net/http: allowed, by the package doc.
			return
		case herr != nil:
			if why := leniencyOf(&r); why == "" {
				t.Fatalf("we accept, net/http refuses (%v): %q", herr, data)
			}
			return
		}
		netConsumed := len(data) - lead - br.Buffered() - rd.Len()
		if n-lead != netConsumed {
			t.Errorf("consumed %d (%d of leading CRLF), net/http %d: %q", n, lead, netConsumed, data)
		}
		if string(r.Method) != req.Method || string(r.Target) != req.RequestURI ||
			r.Major != req.ProtoMajor || r.Minor != req.ProtoMinor {
			t.Errorf("request line %q %q %d.%d, net/http %q %q %d.%d: %q",
				r.Method, r.Target, r.Major, r.Minor, req.Method, req.RequestURI, req.ProtoMajor, req.ProtoMinor, data)
		}
		u, uerr := r.URL()
		if uerr != nil {
			t.Fatalf("URL: %v: %q", uerr, data)
		}
		if diff := cmp.Diff(req.URL, u); diff != "" {
			t.Errorf("URL (-net/http +ours):\n%s\n%q", diff, data)
		}
		// net/http's Request.Host: the URL's host, else the first Host
		// field; ours is Authority by the same rule (RFC 9112 section
		// 3.2.2).
		if string(r.Authority) != req.Host {
			t.Errorf("Authority %q, net/http Host %q: %q", r.Authority, req.Host, data)
		}
		// Normalisation: net/http's server deletes Host from the header
		// after ReadRequest; Header does as the server does. Both drop
		// Transfer-Encoding, keep one Content-Length of identical ones and
		// add Cache-Control for Pragma: no-cache.
		delete(req.Header, "Host")
		if diff := cmp.Diff(req.Header, r.Header()); diff != "" {
			t.Errorf("Header (-net/http +ours):\n%s\n%q", diff, data)
		}
		// Normalisation: without Content-Length and chunked net/http says
		// 0 (no body), this package -1 (no field); chunked is -1 in both.
		wantCL := r.ContentLength
		if r.Chunked {
			wantCL = -1
		} else if wantCL < 0 {
			wantCL = 0
		}
		if req.ContentLength != wantCL {
			t.Errorf("ContentLength %d (chunked %v), net/http %d: %q", r.ContentLength, r.Chunked, req.ContentLength, data)
		}
		if chunked := len(req.TransferEncoding) == 1 && req.TransferEncoding[0] == "chunked"; chunked != r.Chunked || len(req.TransferEncoding) > 1 {
			t.Errorf("Chunked %v, net/http TransferEncoding %q: %q", r.Chunked, req.TransferEncoding, data)
		}
		if r.Close != req.Close {
			t.Errorf("Close %v, net/http %v: %q", r.Close, req.Close, data)
		}
	})
}

// leniencyOf returns why this package accepts a head net/http refuses, or
// "" if it knows no reason: then the two disagree.
func leniencyOf(r *Request) string {
	for _, f := range r.Fields {
		// RFC 9110 section 8.6 lets a recipient take a list of identical
		// Content-Length values as one; net/http refuses the comma.
		if eqFold(f.Name, "content-length") && bytes.IndexByte(f.Value, ',') >= 0 {
			return "identical Content-Length list"
		}
	}
	return ""
}

// checkSplit parses data again in two pieces, each in its own buffer, and
// wants the whole parse's result.
func checkSplit(t *testing.T, data []byte, n int, err error, whole *Request) {
	var want head
	if err == nil {
		want = summary(whole, n)
	}
	var r Request
	k := len(data) / 2
	n2, err2 := r.Parse(bytes.Clone(data[:k]), Limits{})
	if err2 == ErrIncomplete {
		n2, err2 = r.Parse(bytes.Clone(data), Limits{})
	}
	if err2 != err {
		t.Fatalf("in two pieces: %v, whole: %v: %q", err2, err, data)
	}
	if err == nil {
		if diff := cmp.Diff(want, summary(&r, n2)); diff != "" {
			t.Fatalf("in two pieces (-whole +pieces):\n%s\n%q", diff, data)
		}
	}
}

// FuzzChunked decodes each input with ChunkedDecoder and with
// httputil.NewChunkedReader: where both accept, the bodies must be the same.
// net/http stops at the last chunk without reading the trailer section, so
// it sees only the bytes this package consumed; where only net/http
// accepts, this package is stricter (trailing whitespace, extensions outside
// the grammar); where only this package accepts, net/http's heuristic
// against much framing and little data is the only reason allowed.
func FuzzChunked(f *testing.F) {
	for _, s := range []string{
		"5\r\nhello\r\n0\r\n\r\n",
		"5;a=b\r\nhello\r\n6\r\n world\r\n0\r\nX: y\r\n\r\n",
		"5 \r\nhello\r\n0\r\n\r\n",
		"5;a=\"b c\"\r\nhello\r\n0\r\n\r\n",
		"0000000000000005\r\nhello\r\n0\r\n\r\n",
		"5\nhello\r\n0\r\n\r\n",
		"5\r\nhello\n0\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var d ChunkedDecoder
		body, _, n, err := decodeAll(&d, string(data), 0)
		body3, _, n3, err3 := decodeAll(new(ChunkedDecoder), string(data), 3)
		if err != err3 || body != body3 || n != n3 {
			t.Fatalf("whole: %q %d %v; 3 bytes at a time: %q %d %v: %q", body, n, err, body3, n3, err3, data)
		}
		if err != nil {
			return
		}
		got, herr := io.ReadAll(httputil.NewChunkedReader(bytes.NewReader(data[:n])))
		if herr != nil {
			if !strings.Contains(herr.Error(), "too much non-data") {
				t.Fatalf("we accept %q, net/http refuses: %v: %q", body, herr, data)
			}
			return
		}
		if string(got) != body {
			t.Fatalf("body %q, net/http %q: %q", body, got, data)
		}
	})
}
