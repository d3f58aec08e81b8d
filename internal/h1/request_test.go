package h1

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// head is what a test compares of a parsed Request, as strings.
type head struct {
	Method, Target string
	Form           Form
	Minor          int
	Authority      string
	Fields         []string // "Name: value"
	ContentLength  int64
	Chunked        bool
	Close          bool
	Continue       bool
	N              int
}

func summary(r *Request, n int) head {
	h := head{
		Method: string(r.Method), Target: string(r.Target), Form: r.Form,
		Minor: r.Minor, Authority: string(r.Authority),
		ContentLength: r.ContentLength, Chunked: r.Chunked,
		Close: r.Close, Continue: r.Continue, N: n,
	}
	for _, f := range r.Fields {
		h.Fields = append(h.Fields, string(f.Name)+": "+string(f.Value))
	}
	return h
}

func parseString(s string, lim Limits) (head, error) {
	var r Request
	n, err := r.Parse([]byte(s), lim)
	if err != nil {
		return head{}, err
	}
	return summary(&r, n), nil
}

// The valid heads and what they mean.
var validHeads = []struct {
	name, in string
	want     head
}{
	{"wrk GET", "GET /plaintext HTTP/1.1\r\nHost: localhost:8080\r\n\r\n",
		head{Method: "GET", Target: "/plaintext", Form: OriginForm, Minor: 1, Authority: "localhost:8080",
			Fields: []string{"Host: localhost:8080"}, ContentLength: -1}},
	{"POST with CL", "POST /p?q=1 HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhello",
		head{Method: "POST", Target: "/p?q=1", Form: OriginForm, Minor: 1, Authority: "h",
			Fields: []string{"Host: h", "Content-Length: 5"}, ContentLength: 5}},
	{"chunked", "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: Chunked\r\n\r\n",
		head{Method: "POST", Target: "/", Form: OriginForm, Minor: 1, Authority: "h",
			Fields: []string{"Host: h", "Transfer-Encoding: Chunked"}, ContentLength: -1, Chunked: true}},
	{"OWS trimmed", "GET / HTTP/1.1\r\nHost:h\r\nX-A: \t a b \t\r\nX-B:\r\n\r\n",
		head{Method: "GET", Target: "/", Form: OriginForm, Minor: 1, Authority: "h",
			Fields: []string{"Host: h", "X-A: a b", "X-B: "}, ContentLength: -1}},
	{"obs-text in value", "GET / HTTP/1.1\r\nHost: h\r\nX: caf\xc3\xa9\r\n\r\n",
		head{Method: "GET", Target: "/", Form: OriginForm, Minor: 1, Authority: "h",
			Fields: []string{"Host: h", "X: caf\xc3\xa9"}, ContentLength: -1}},
	{"HTTP/1.0 closes", "GET / HTTP/1.0\r\n\r\n",
		head{Method: "GET", Target: "/", Form: OriginForm, Minor: 0, ContentLength: -1, Close: true}},
	{"HTTP/1.0 keep-alive", "GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n",
		head{Method: "GET", Target: "/", Form: OriginForm, Minor: 0, ContentLength: -1,
			Fields: []string{"Connection: Keep-Alive"}}},
	{"HTTP/1.1 close", "GET / HTTP/1.1\r\nHost: h\r\nConnection: foo, CLOSE\r\n\r\n",
		head{Method: "GET", Target: "/", Form: OriginForm, Minor: 1, Authority: "h", ContentLength: -1,
			Fields: []string{"Host: h", "Connection: foo, CLOSE"}, Close: true}},
	{"HTTP/1.7 served as 1.1", "GET / HTTP/1.7\r\nHost: h\r\n\r\n",
		head{Method: "GET", Target: "/", Form: OriginForm, Minor: 7, Authority: "h", ContentLength: -1,
			Fields: []string{"Host: h"}}},
	{"absolute-form wins over Host", "GET http://example.com:81/a?b HTTP/1.1\r\nHost: other\r\n\r\n",
		head{Method: "GET", Target: "http://example.com:81/a?b", Form: AbsoluteForm, Minor: 1,
			Authority: "example.com:81", Fields: []string{"Host: other"}, ContentLength: -1}},
	{"absolute-form https no path", "GET HTTPS://[::1]?x HTTP/1.1\r\nHost: h\r\n\r\n",
		head{Method: "GET", Target: "HTTPS://[::1]?x", Form: AbsoluteForm, Minor: 1,
			Authority: "[::1]", Fields: []string{"Host: h"}, ContentLength: -1}},
	{"CONNECT", "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n",
		head{Method: "CONNECT", Target: "example.com:443", Form: AuthorityForm, Minor: 1,
			Authority: "example.com:443", Fields: []string{"Host: example.com:443"}, ContentLength: -1}},
	{"CONNECT origin-form (net/rpc)", "CONNECT /_goRPC_ HTTP/1.0\r\n\r\n",
		head{Method: "CONNECT", Target: "/_goRPC_", Form: OriginForm, ContentLength: -1, Close: true}},
	{"OPTIONS *", "OPTIONS * HTTP/1.1\r\nHost: h\r\n\r\n",
		head{Method: "OPTIONS", Target: "*", Form: AsteriskForm, Minor: 1, Authority: "h",
			Fields: []string{"Host: h"}, ContentLength: -1}},
	{"100-continue", "PUT /x HTTP/1.1\r\nHost: h\r\nExpect: 100-Continue\r\nContent-Length: 10\r\n\r\n",
		head{Method: "PUT", Target: "/x", Form: OriginForm, Minor: 1, Authority: "h", ContentLength: 10,
			Fields: []string{"Host: h", "Expect: 100-Continue", "Content-Length: 10"}, Continue: true}},
	{"100-continue ignored in 1.0", "PUT /x HTTP/1.0\r\nExpect: 100-continue\r\n\r\n",
		head{Method: "PUT", Target: "/x", Form: OriginForm, ContentLength: -1,
			Fields: []string{"Expect: 100-continue"}, Close: true}},
	{"identical CLs", "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\nContent-Length: 3, 3\r\n\r\n",
		head{Method: "POST", Target: "/", Form: OriginForm, Minor: 1, Authority: "h", ContentLength: 3,
			Fields: []string{"Host: h", "Content-Length: 3", "Content-Length: 3, 3"}}},
	{"leading CRLFs skipped", "\r\n\r\nGET / HTTP/1.1\r\nHost: h\r\n\r\n",
		head{Method: "GET", Target: "/", Form: OriginForm, Minor: 1, Authority: "h",
			Fields: []string{"Host: h"}, ContentLength: -1}},
	{"empty Host in 1.1", "GET / HTTP/1.1\r\nHost:\r\n\r\n",
		head{Method: "GET", Target: "/", Form: OriginForm, Minor: 1,
			Fields: []string{"Host: "}, ContentLength: -1}},
	{"pipelined: only the first", "GET /a HTTP/1.1\r\nHost: h\r\n\r\nGET /b HTTP/1.1\r\nHost: h\r\n\r\n",
		head{Method: "GET", Target: "/a", Form: OriginForm, Minor: 1, Authority: "h",
			Fields: []string{"Host: h"}, ContentLength: -1}},
	{"raw printable target", "GET /a|b{c}\"d?e=%41^ HTTP/1.1\r\nHost: h\r\n\r\n",
		head{Method: "GET", Target: "/a|b{c}\"d?e=%41^", Form: OriginForm, Minor: 1, Authority: "h",
			Fields: []string{"Host: h"}, ContentLength: -1}},
}

func TestParseValid(t *testing.T) {
	for _, tt := range validHeads {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseString(tt.in, Limits{})
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			want := tt.want
			want.N = headLen(tt.in)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// headLen is the length of the first head in s, leading CRLFs included.
func headLen(s string) int {
	lead := len(s) - len(strings.TrimLeft(s, "\r\n"))
	return lead + strings.Index(s[lead:], "\r\n\r\n") + 4
}

// The refused heads, each with its sentinel.
var invalidHeads = []struct {
	name, in string
	want     error
}{
	// Framing: the smuggling vectors.
	{"CL and TE", "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n", ErrContentLengthWithTransferEncoding},
	{"TE and CL", "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n", ErrContentLengthWithTransferEncoding},
	{"two differing CLs", "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n", ErrConflictingContentLength},
	{"differing CL list", "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5, 6\r\n\r\n", ErrConflictingContentLength},
	{"CL 5 and 05", "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nContent-Length: 05\r\n\r\n", ErrConflictingContentLength},
	{"CL +5", "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: +5\r\n\r\n", ErrBadContentLength},
	{"CL -1", "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: -1\r\n\r\n", ErrBadContentLength},
	{"CL 0x10", "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 0x10\r\n\r\n", ErrBadContentLength},
	{"CL space inside", "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 1 5\r\n\r\n", ErrBadContentLength},
	{"CL empty", "POST / HTTP/1.1\r\nHost: h\r\nContent-Length:\r\n\r\n", ErrBadContentLength},
	{"CL empty element", "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5,\r\n\r\n", ErrBadContentLength},
	{"CL overflow", "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 9223372036854775808\r\n\r\n", ErrBadContentLength},
	{"TE chunked, gzip", "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked, gzip\r\n\r\n", ErrBadTransferEncoding},
	{"TE gzip, chunked", "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", ErrUnsupportedTransferEncoding},
	{"TE gzip", "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip\r\n\r\n", ErrUnsupportedTransferEncoding},
	{"TE identity", "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: identity\r\n\r\n", ErrUnsupportedTransferEncoding},
	{"TE chunked twice", "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", ErrBadTransferEncoding},
	{"TE chunked then gzip field", "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: gzip\r\n\r\n", ErrBadTransferEncoding},
	{"TE chunked trailing comma", "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked,\r\n\r\n", ErrBadTransferEncoding},
	{"TE empty", "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding:\r\n\r\n", ErrBadTransferEncoding},
	{"TE parameter", "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked;q=1\r\n\r\n", ErrBadTransferEncoding},
	{"TE xchunked", "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: xchunked\r\n\r\n", ErrUnsupportedTransferEncoding},
	{"TE in HTTP/1.0", "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", ErrTransferEncodingHTTP10},
	{"TE with vertical tab", "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: \vchunked\r\n\r\n", ErrBadFieldValue},

	// Field lines.
	{"obs-fold", "GET / HTTP/1.1\r\nHost: h\r\nX: a\r\n b\r\n\r\n", ErrObsFold},
	{"obs-fold tab", "GET / HTTP/1.1\r\nHost: h\r\nX: a\r\n\tb\r\n\r\n", ErrObsFold},
	{"space after request line", "GET / HTTP/1.1\r\n Host: h\r\n\r\n", ErrObsFold},
	{"space before colon", "GET / HTTP/1.1\r\nHost : h\r\n\r\n", ErrSpaceBeforeColon},
	{"tab before colon", "GET / HTTP/1.1\r\nHost\t: h\r\n\r\n", ErrSpaceBeforeColon},
	{"space in name", "GET / HTTP/1.1\r\nHost: h\r\nX Y: 1\r\n\r\n", ErrSpaceBeforeColon},
	{"CL with space before colon", "POST / HTTP/1.1\r\nHost: h\r\nContent-Length : 5\r\n\r\n", ErrSpaceBeforeColon},
	{"no colon", "GET / HTTP/1.1\r\nHost: h\r\nfoo\r\n\r\n", ErrBadFieldName},
	{"empty name", "GET / HTTP/1.1\r\nHost: h\r\n: x\r\n\r\n", ErrBadFieldName},
	{"non-token name", "GET / HTTP/1.1\r\nHost: h\r\nX@Y: 1\r\n\r\n", ErrBadFieldName},
	{"bare CR in value", "GET / HTTP/1.1\r\nHost: h\r\nX: a\rb\r\n\r\n", ErrBareCR},
	{"bare CR ends value", "GET / HTTP/1.1\r\nHost: h\r\nX: a\r\r\n\r\n", ErrBareCR},
	{"NUL in value", "GET / HTTP/1.1\r\nHost: h\r\nX: a\x00b\r\n\r\n", ErrBadFieldValue},
	{"DEL in value", "GET / HTTP/1.1\r\nHost: h\r\nX: a\x7fb\r\n\r\n", ErrBadFieldValue},
	{"ESC in value", "GET / HTTP/1.1\r\nHost: h\r\nX: a\x1bb\r\n\r\n", ErrBadFieldValue},
	{"bare LF ends field", "GET / HTTP/1.1\r\nHost: h\nX: 1\r\n\r\n", ErrBareLF},
	{"bare LF ends head", "GET / HTTP/1.1\r\nHost: h\r\n\n", ErrBareLF},
	{"bare LF ends request line", "GET / HTTP/1.1\nHost: h\r\n\r\n", ErrBareLF},
	{"bare LF before request", "\nGET / HTTP/1.1\r\nHost: h\r\n\r\n", ErrBareLF},
	{"bare LF everywhere", "GET / HTTP/1.1\nHost: h\n\n", ErrBareLF},

	// Host.
	{"no Host in 1.1", "GET / HTTP/1.1\r\n\r\n", ErrBadHost},
	{"no Host in CONNECT", "CONNECT h:443 HTTP/1.1\r\n\r\n", ErrBadHost},
	{"two Hosts", "GET / HTTP/1.1\r\nHost: a\r\nHost: a\r\n\r\n", ErrBadHost},
	{"two Hosts in 1.0", "GET / HTTP/1.0\r\nHost: a\r\nhost: b\r\n\r\n", ErrBadHost},
	{"Host with path", "GET / HTTP/1.1\r\nHost: a/b\r\n\r\n", ErrBadHost},
	{"Host with userinfo", "GET / HTTP/1.1\r\nHost: u@a\r\n\r\n", ErrBadHost},
	{"Host bad port", "GET / HTTP/1.1\r\nHost: a:8x\r\n\r\n", ErrBadHost},
	{"Host two colons", "GET / HTTP/1.1\r\nHost: a:1:2\r\n\r\n", ErrBadHost},

	// Request lines.
	{"two spaces", "GET  / HTTP/1.1\r\nHost: h\r\n\r\n", ErrBadRequestLine},
	{"two spaces before version", "GET /  HTTP/1.1\r\nHost: h\r\n\r\n", ErrBadVersion},
	{"tab", "GET\t/ HTTP/1.1\r\nHost: h\r\n\r\n", ErrBadRequestLine},
	{"tab in target", "GET /\t HTTP/1.1\r\nHost: h\r\n\r\n", ErrBadTarget},
	{"missing version", "GET /\r\nHost: h\r\n\r\n", ErrBadRequestLine},
	{"HTTP/0.9 style", "GET /\r\n\r\n", ErrBadRequestLine},
	{"lowercase version", "GET / http/1.1\r\nHost: h\r\n\r\n", ErrBadVersion},
	{"trailing space", "GET / HTTP/1.1 \r\nHost: h\r\n\r\n", ErrBadVersion},
	{"leading space", " GET / HTTP/1.1\r\nHost: h\r\n\r\n", ErrBadRequestLine},
	{"two-digit minor", "GET / HTTP/1.10\r\nHost: h\r\n\r\n", ErrBadVersion},
	{"no method", "/ HTTP/1.1\r\nHost: h\r\n\r\n", ErrBadRequestLine},
	{"bad method", "G(T / HTTP/1.1\r\nHost: h\r\n\r\n", ErrBadRequestLine},
	{"bare CR in request line", "GET /\r HTTP/1.1\r\nHost: h\r\n\r\n", ErrBareCR},
	{"HTTP/2.0", "GET / HTTP/2.0\r\nHost: h\r\n\r\n", ErrVersionNotSupported},
	{"h2 preface", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", ErrVersionNotSupported},
	{"HTTP/0.9 versioned", "GET / HTTP/0.9\r\nHost: h\r\n\r\n", ErrVersionNotSupported},
	{"HTTP/3.0", "GET / HTTP/3.0\r\nHost: h\r\n\r\n", ErrVersionNotSupported},

	// Request-targets.
	{"NUL in target", "GET /\x00 HTTP/1.1\r\nHost: h\r\n\r\n", ErrBadTarget},
	{"DEL in target", "GET /\x7f HTTP/1.1\r\nHost: h\r\n\r\n", ErrBadTarget},
	{"UTF-8 in target", "GET /caf\xc3\xa9 HTTP/1.1\r\nHost: h\r\n\r\n", ErrBadTarget},
	{"fragment", "GET /a#b HTTP/1.1\r\nHost: h\r\n\r\n", ErrBadTarget},
	{"bad escape", "GET /a%2 HTTP/1.1\r\nHost: h\r\n\r\n", ErrBadTarget},
	{"bad escape in query", "GET /a?b=%zz HTTP/1.1\r\nHost: h\r\n\r\n", ErrBadTarget},
	{"relative", "GET a/b HTTP/1.1\r\nHost: h\r\n\r\n", ErrBadTarget},
	{"asterisk for GET", "GET * HTTP/1.1\r\nHost: h\r\n\r\n", ErrBadTarget},
	{"authority for GET", "GET h:80 HTTP/1.1\r\nHost: h\r\n\r\n", ErrBadTarget},
	{"CONNECT without port", "CONNECT h HTTP/1.1\r\nHost: h\r\n\r\n", ErrBadTarget},
	{"CONNECT absolute", "CONNECT http://h:80/ HTTP/1.1\r\nHost: h\r\n\r\n", ErrBadTarget},
	{"CONNECT userinfo", "CONNECT u@h:80 HTTP/1.1\r\nHost: h\r\n\r\n", ErrBadTarget},
	{"ftp scheme", "GET ftp://h/ HTTP/1.1\r\nHost: h\r\n\r\n", ErrBadTarget},
	{"empty host", "GET http:///a HTTP/1.1\r\nHost: h\r\n\r\n", ErrBadTarget},
	{"userinfo", "GET http://u:p@h/ HTTP/1.1\r\nHost: h\r\n\r\n", ErrBadTarget},
	{"IPv4 in brackets", "GET http://[1.2.3.4]/ HTTP/1.1\r\nHost: h\r\n\r\n", ErrBadTarget},
	{"bad IPv6", "GET http://[fffff::]/ HTTP/1.1\r\nHost: h\r\n\r\n", ErrBadTarget},
	{"bad IPv6 Host", "GET / HTTP/1.1\r\nHost: [::1:2:3:4:5:6:7:8:9]\r\n\r\n", ErrBadHost},
	{"IPv6 zone", "GET http://[fe80::1%25eth0]/ HTTP/1.1\r\nHost: h\r\n\r\n", ErrBadTarget},

	{"Expect other", "GET / HTTP/1.1\r\nHost: h\r\nExpect: 200-ok\r\n\r\n", ErrExpectationFailed},
	{"Expect list", "GET / HTTP/1.1\r\nHost: h\r\nExpect: 100-continue, x\r\n\r\n", ErrExpectationFailed},
}

func TestParseInvalid(t *testing.T) {
	for _, tt := range invalidHeads {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseString(tt.in, Limits{})
			if err != tt.want {
				t.Fatalf("Parse = %+v, %v; want %v", got, err, tt.want)
			}
		})
	}
}

func TestLimits(t *testing.T) {
	lim := Limits{MaxHeadBytes: 1 << 12, MaxTargetBytes: 100, MaxFields: 10}
	many := func(n int) string {
		var b strings.Builder
		b.WriteString("GET / HTTP/1.1\r\nHost: h\r\n")
		for i := range n - 1 {
			fmt.Fprintf(&b, "X-%d: %d\r\n", i, i)
		}
		return b.String() + "\r\n"
	}
	long := strings.Repeat("a", 100)
	for _, tt := range []struct {
		name, in string
		lim      Limits
		want     error
	}{
		{"target at the limit", "GET /" + long[1:] + " HTTP/1.1\r\nHost: h\r\n\r\n", lim, nil},
		{"target beyond", "GET /" + long + " HTTP/1.1\r\nHost: h\r\n\r\n", lim, ErrURITooLong},
		{"target beyond, incomplete", "GET /" + long, lim, ErrURITooLong},
		{"target beyond, no version", "GET /" + long + "\r\n\r\n", lim, ErrURITooLong},
		{"default target limit", "GET /" + strings.Repeat("a", DefaultMaxTargetBytes) + " HTTP/1.1\r\nHost: h\r\n\r\n", Limits{}, ErrURITooLong},
		{"fields at the limit", many(10), lim, nil},
		{"fields beyond", many(11), lim, ErrTooManyFields},
		{"10,000 fields", many(10000), Limits{}, ErrTooManyFields},
		{"head at the limit", "GET / HTTP/1.1\r\nHost: h\r\nX: " + strings.Repeat("v", 4096-len("GET / HTTP/1.1\r\nHost: h\r\nX: \r\n\r\n")) + "\r\n\r\n", lim, nil},
		{"head beyond", "GET / HTTP/1.1\r\nHost: h\r\nX: " + strings.Repeat("v", 4097-len("GET / HTTP/1.1\r\nHost: h\r\nX: \r\n\r\n")) + "\r\n\r\n", lim, ErrHeaderTooLarge},
		{"head beyond, incomplete", "GET / HTTP/1.1\r\nHost: h\r\nX: " + strings.Repeat("v", 5000), lim, ErrHeaderTooLarge},
		{"huge field, default limit", "GET / HTTP/1.1\r\nHost: h\r\nX: " + strings.Repeat("v", 1<<20) + "\r\n\r\n", Limits{}, ErrHeaderTooLarge},
		{"leading CRLFs count", strings.Repeat("\r\n", 2048) + "GET / HTTP/1.1\r\nHost: h\r\n\r\n", lim, ErrHeaderTooLarge},
		{"bad method, long target", "G(T /" + long + " HTTP/1.1\r\nHost: h\r\n\r\n", lim, ErrBadRequestLine},
		{"bare CR, long target", "GET /\r" + long + " HTTP/1.1\r\nHost: h\r\n\r\n", lim, ErrBareCR},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parseString(tt.in, tt.lim)
			if err != tt.want {
				t.Fatalf("Parse: %v; want %v", err, tt.want)
			}
			if len(tt.in) > 20000 {
				return
			}
			var r Request
			for k := 1; k <= len(tt.in); k++ {
				if _, err = r.Parse([]byte(tt.in[:k]), tt.lim); err != ErrIncomplete {
					break
				}
			}
			if err != tt.want {
				t.Fatalf("Parse byte by byte: %v; want %v", err, tt.want)
			}
		})
	}
}

// TestIncremental feeds every head of the tables a byte at a time, each
// time in a freshly copied buffer (the caller's buffer may move), and wants
// what parsing it whole gives.
func TestIncremental(t *testing.T) {
	var ins []string
	for _, tt := range validHeads {
		ins = append(ins, tt.in)
	}
	for _, tt := range invalidHeads {
		ins = append(ins, tt.in)
	}
	for _, in := range ins {
		want, wantErr := parseString(in, Limits{})
		var r Request
		var got head
		var err error
		for k := 1; k <= len(in); k++ {
			buf := []byte(in[:k])
			var n int
			n, err = r.Parse(buf, Limits{})
			if err == ErrIncomplete {
				continue
			}
			if err == nil {
				got = summary(&r, n)
			}
			break
		}
		if err != wantErr {
			t.Errorf("%q: byte by byte: %v; whole: %v", in, err, wantErr)
			continue
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%q: byte by byte (-whole +incremental):\n%s", in, diff)
		}
	}
}

func TestIncompleteThenReuse(t *testing.T) {
	var r Request
	if _, err := r.Parse([]byte("GET / HTTP/1.1\r\nHo"), Limits{}); err != ErrIncomplete {
		t.Fatalf("got %v, want ErrIncomplete", err)
	}
	r.Reset()
	in := "POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\nhiGET /y HTTP/1.0\r\n\r\n"
	n, err := r.Parse([]byte(in), Limits{})
	if err != nil || string(r.Target) != "/x" || r.ContentLength != 2 {
		t.Fatalf("first: %d, %v, %+v", n, err, summary(&r, n))
	}
	rest := in[n+2:]
	n, err = r.Parse([]byte(rest), Limits{})
	if err != nil || n != len(rest) || string(r.Target) != "/y" || len(r.Fields) != 0 || !r.Close || r.ContentLength != -1 {
		t.Fatalf("second: %d, %v, %+v", n, err, summary(&r, n))
	}
}

func TestStatus(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want int
	}{
		{nil, 0},
		{ErrIncomplete, 0},
		{ErrHeaderTooLarge, 431},
		{ErrTooManyFields, 431},
		{ErrURITooLong, 414},
		{ErrBareLF, 400},
		{ErrContentLengthWithTransferEncoding, 400},
		{ErrUnsupportedTransferEncoding, 501},
		{ErrVersionNotSupported, 505},
		{ErrExpectationFailed, 417},
		{ErrBodyTooLarge, 413},
		{fmt.Errorf("wrapped: %w", ErrBadHost), 400},
		{errors.New("other"), 500},
		{fmt.Errorf("wrapped: %w", statusOnly(503)), 503}, // any error with a Status method
	} {
		if got := Status(tt.err); got != tt.want {
			t.Errorf("Status(%v) = %d, want %d", tt.err, got, tt.want)
		}
	}
}

type statusOnly int

func (s statusOnly) Error() string { return "status " + strconv.Itoa(int(s)) }
func (s statusOnly) Status() int   { return int(s) }

func TestHeaderAndURL(t *testing.T) {
	var r Request
	in := "GET http://example.com/a%20b?c=d HTTP/1.1\r\nhost: x\r\nx-multi: 1\r\nX-Multi: 2\r\nContent-Length: 007\r\ncontent-length: 007\r\nPragma: no-cache\r\n\r\n"
	if _, err := r.Parse([]byte(in), Limits{}); err != nil {
		t.Fatal(err)
	}
	want := http.Header{
		"X-Multi":        {"1", "2"},
		"Content-Length": {"007"},
		"Pragma":         {"no-cache"},
		"Cache-Control":  {"no-cache"},
	}
	if diff := cmp.Diff(want, r.Header()); diff != "" {
		t.Errorf("Header (-want +got):\n%s", diff)
	}
	u, err := r.URL()
	if err != nil {
		t.Fatal(err)
	}
	if u.Host != "example.com" || u.Path != "/a b" || u.RawQuery != "c=d" || r.ContentLength != 7 {
		t.Errorf("URL = %#v, ContentLength %d", u, r.ContentLength)
	}
	if _, err := r.Parse([]byte("CONNECT h:443 HTTP/1.1\r\nHost: h:443\r\n\r\n"), Limits{}); err != nil {
		t.Fatal(err)
	}
	if u, err := r.URL(); err != nil || u.Host != "h:443" || u.Scheme != "" || u.Path != "" {
		t.Errorf("CONNECT URL = %#v, %v", u, err)
	}
}

func TestParseAllocs(t *testing.T) {
	in := []byte("POST /submit?x=1 HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nConnection: keep-alive\r\nExpect: 100-continue\r\n\r\n")
	var r Request
	r.Parse(in, Limits{})
	if a := testing.AllocsPerRun(100, func() { r.Parse(in, Limits{}) }); a != 0 {
		t.Errorf("Parse allocates %v times per head, want 0", a)
	}
}

// TestUpgrade: Upgrade reports a protocol switch asked for, h2c aside.
func TestUpgrade(t *testing.T) {
	for value, want := range map[string]bool{
		"websocket":      true,
		"WebSocket":      true,
		"h2c":            false,
		"H2C":            false,
		"h2c, websocket": true,
		"":               false,
	} {
		var r Request
		head := "GET / HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: " + value + "\r\n\r\n"
		if _, err := r.Parse([]byte(head), Limits{}); err != nil {
			t.Fatalf("Upgrade: %q: %v", value, err)
		}
		if r.Upgrade != want {
			t.Errorf("Upgrade: %q: Upgrade %v, want %v", value, r.Upgrade, want)
		}
	}
}
