//go:build linux

package httpd_test

import (
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"strings"
)

// Tags of the cases each broken copy of httpd (parity_broken_test.go)
// must be caught by.
const (
	tagTrailers = "trailers" // trailers sent by the server
	tagHead     = "head"     // a HEAD whose GET has a body
	tagContinue = "continue" // a 100 Continue sent before the final response
)

// suiteCases is the suite's table, by area.
func suiteCases() []suiteCase {
	var cases []suiteCase
	add := func(area string, cs ...suiteCase) {
		for _, c := range cs {
			c.name = area + "/" + c.name
			cases = append(cases, c)
		}
	}
	cs := func(name, raw string) suiteCase {
		return suiteCase{parityCase: parityCase{name: name, raw: raw}}
	}
	tagged := func(c suiteCase, tags ...string) suiteCase { c.tags = tags; return c }
	noPipe := func(c suiteCase) suiteCase { c.noPipeline = true; return c }
	// A deviation is checked on the wire only: net/http's client would
	// send another request, or see the deviation.
	dev := func(c suiteCase, d func(std, ours wireResult) string) suiteCase {
		c.deviation, c.noClient = d, true
		return c
	}
	// An HTTP/1.0 request goes through the client as HTTP/1.1, where the
	// servers agree.
	dev10 := func(c suiteCase) suiteCase { c.deviation = http10; return c }
	ignoringBody := func(c suiteCase, fields ...string) suiteCase {
		c.ignore, c.ignoreBody = fields, true
		return c
	}
	noClient := func(c suiteCase) suiteCase { c.noClient = true; return c }

	add("writer",
		cs("200", get("/hello")),
		cs("201 with body", get("/status/201/made")),
		cs("204", get("/status/204")),
		cs("204 with body written", get("/status/204/ignored")),
		cs("205", get("/status/205/reset")),
		cs("304", get("/status/304")),
		cs("404", get("/status/404/gone")),
		cs("418", get("/status/418/teapot")),
		cs("299 no status text", get("/status/299/odd")),
		cs("599", get("/status/599/odd")),
		cs("999", get("/status/999/odd")),
		cs("WriteHeader twice", get("/write/twice")),
		cs("WriteHeader after Write", get("/write/after-write")),
		cs("empty Write", get("/write/empty")),
		cs("nothing written", get("/write/nothing")),
		cs("header only, repeated field", get("/write/header-only")),
		cs("Content-Length exact", get("/write/cl-exact")),
		cs("Content-Length, less written", get("/write/cl-short")),
		cs("Content-Length, more written", get("/write/cl-over")),
		cs("Content-Length, large", get("/write/cl-large")),
		cs("many small writes", get("/write/many-writes")),
		cs("small body", get("/size/10")),
		cs("2048 bytes", get("/size/2048")),
		cs("2049 bytes", get("/size/2049")),
		cs("large body, one write", get("/size/300000")),
		cs("large body, small writes", get("/size/100000?w=1000")),
		cs("1 MiB", get("/size/1048576?w=65536")),
	)
	add("flush",
		cs("nothing written", get("/flush/nothing")),
		cs("between writes", get("/flush/between")),
		tagged(cs("HEAD", head("/flush/between")), tagHead),
		cs("after WriteHeader", get("/flush/header")),
		cs("204", get("/flush/204")),
		cs("declared length", get("/flush/cl")),
		cs("many", get("/flush/many")),
		cs("ResponseController.Flush", get("/rc/flush")),
		cs("SetWriteDeadline", get("/rc/write-deadline")),
		cs("SetWriteDeadline zero", get("/rc/clear-deadline")),
		cs("SetReadDeadline", post("/rc/read-deadline", "body")),
		cs("EnableFullDuplex", post("/rc/full-duplex", "duplex body")),
		cs("EnableFullDuplex, chunked upload", chunked("/rc/full-duplex", []string{"ab", "cd"}, nil)),
	)
	add("trailers",
		tagged(cs("declared", get("/trailer/declared")), tagTrailers),
		tagged(cs("two fields, one unset", get("/trailer/two")), tagTrailers),
		cs("TrailerPrefix after a small body", get("/trailer/prefix")),
		tagged(cs("TrailerPrefix", get("/trailer/prefix-first")), tagTrailers),
		tagged(cs("TrailerPrefix after flush", get("/trailer/prefix-after-flush")), tagTrailers),
		tagged(cs("after flush", get("/trailer/after-flush")), tagTrailers),
		cs("undeclared", get("/trailer/undeclared")),
		tagged(cs("forbidden field", get("/trailer/forbidden")), tagTrailers),
		tagged(cs("large body", get("/trailer/large")), tagTrailers),
		tagged(cs("no body", get("/trailer/no-body")), tagTrailers),
		cs("204", get("/trailer/204")),
		cs("with Content-Length", get("/trailer/cl")),
		tagged(cs("HEAD", head("/trailer/declared")), tagHead),
		dev10(cs("HTTP/1.0", rq("GET /trailer/declared HTTP/1.0", nil, ""))),
	)
	add("1xx",
		cs("103 Early Hints", get("/hints/one")),
		cs("two 103s then 201", get("/hints/two")),
		cs("103 then 204", get("/hints/then-204")),
		cs("103 after the final status", get("/hints/after-final")),
		cs("102 Processing", get("/hints/processing")),
		cs("103 flushed", get("/hints/flushed")),
		cs("100 written by the handler", post("/hints/continue", "body")),
		dev10(cs("103 to HTTP/1.0", rq("GET /hints/one HTTP/1.0", nil, ""))),
	)
	add("head",
		tagged(cs("small", head("/hello")), tagHead),
		tagged(cs("large", head("/size/5000")), tagHead),
		tagged(cs("Content-Length", head("/write/cl-exact")), tagHead),
		cs("204", head("/status/204")),
		cs("304", head("/status/304")),
		tagged(cs("http.Error", head("/error/teapot")), tagHead),
		tagged(cs("redirect", head("/redirect/302?to=/elsewhere")), tagHead),
		tagged(cs("file", head("/fs/a.txt")), tagHead),
		tagged(cs("ServeContent range", head("/content", "Range: bytes=0-9")), tagHead),
		tagged(cs("Connection: close", head("/hello", "Connection: close")), tagHead),
		tagged(cs("then GET", head("/hello")+get("/hello")), tagHead),
	)
	add("sniff",
		cs("html", get("/sniff/html")),
		cs("png", get("/sniff/png")),
		cs("text", get("/sniff/text")),
		cs("json", get("/sniff/json")),
		cs("gzip", get("/sniff/gzip")),
		cs("pdf", get("/sniff/pdf")),
		cs("large", get("/sniff/large")),
		cs("empty", get("/sniff/empty")),
		cs("suppressed", get("/sniff/suppressed")),
		cs("nosniff", get("/sniff/nosniff")),
		cs("explicit", get("/sniff/explicit")),
	)
	add("helpers",
		cs("http.Error", get("/error/teapot")),
		cs("http.Error over set fields", get("/error/headers")),
		cs("http.NotFound", get("/error/notfound")),
		cs("Redirect 301", get("/redirect/301?to=/new")),
		cs("Redirect 302 relative", get("/redirect/302?to=../up")),
		cs("Redirect 303 POST", post("/redirect/303?to=/done", "x")),
		cs("Redirect 307 absolute", get("/redirect/307?to=http://other.example/x?q=1")),
		cs("Redirect with query", get("/redirect/302?to=/a%20b")),
		cs("ServeContent", get("/content")),
		cs("ServeContent range", get("/content", "Range: bytes=10-19")),
		cs("ServeContent suffix range", get("/content", "Range: bytes=-5")),
		cs("ServeContent open range", get("/content", "Range: bytes=995-")),
		// The parts' boundary is random.
		ignoringBody(cs("ServeContent multiple ranges", get("/content", "Range: bytes=0-1,5-6")), "Content-Type"),
		cs("ServeContent unsatisfiable", get("/content", "Range: bytes=2000-")),
		cs("ServeContent If-Modified-Since", get("/content", "If-Modified-Since: "+suiteModTime.Format(http.TimeFormat))),
		cs("ServeContent If-Modified-Since old", get("/content", "If-Modified-Since: Mon, 01 Jan 2001 00:00:00 GMT")),
		cs("ServeContent If-None-Match", get("/content", `If-None-Match: "v1"`)),
		cs("ServeContent If-None-Match other", get("/content", `If-None-Match: "v0"`)),
		cs("ServeContent If-Range", get("/content", `If-Range: "v1"`, "Range: bytes=0-3")),
		cs("ServeContent If-Range stale", get("/content", `If-Range: "v0"`, "Range: bytes=0-3")),
		cs("ServeContent If-Match fails", get("/content", `If-Match: "v0"`)),
		cs("FileServer file", get("/fs/a.txt")),
		cs("FileServer index", get("/fs/")),
		cs("FileServer index.html redirect", get("/fs/index.html")),
		cs("FileServer directory redirect", get("/fs/dir")),
		cs("FileServer listing", get("/fs/dir/")),
		cs("FileServer missing", get("/fs/missing")),
		cs("FileServer range", get("/fs/a.txt", "Range: bytes=5-9")),
		cs("FileServer not modified", get("/fs/a.txt", "If-Modified-Since: "+suiteModTime.Format(http.TimeFormat))),
		cs("FileServer large", get("/fs/big.bin")),
		cs("FileServer empty", get("/fs/empty.txt")),
		cs("FileServer POST", post("/fs/a.txt", "x")),
		cs("TimeoutHandler in time", get("/timeout/fast")),
		cs("TimeoutHandler timed out", get("/timeout/slow")),
		cs("ReverseProxy", get("/proxy/hello")),
		tagged(cs("ReverseProxy trailers", get("/proxy/trailer")), tagTrailers),
		cs("ReverseProxy large", get("/proxy/big")),
		cs("ReverseProxy POST", post("/proxy/echo", "to the backend")),
		cs("ReverseProxy 204", get("/proxy/204")),
		tagged(cs("ReverseProxy HEAD", head("/proxy/hello")), tagHead),
		cs("ReverseProxy backend down", get("/proxydown/hello")),
		cs("StripPrefix", get("/strip/a/b?c=d")),
		cs("StripPrefix escaped", get("/strip/a%2Fb")),
		cs("MaxBytesReader within", post("/maxbytes", "small")),
	)
	add("mux",
		cs("GET wildcard", get("/mux/items/7")),
		tagged(cs("HEAD on GET pattern", head("/mux/items/7")), tagHead),
		cs("405 with Allow", rq("DELETE /mux/items/7 HTTP/1.1", []string{"Host: x"}, "")),
		cs("405 POST-only", rq("PUT /mux/items HTTP/1.1", []string{"Host: x", "Content-Length: 1"}, "x")),
		cs("POST", post("/mux/items", "new")),
		cs("trailing slash redirect", get("/mux/dir")),
		cs("subtree", get("/mux/dir/a/b")),
		cs("404", get("/mux/nope")),
		cs("clean path redirect", get("/mux/dir/../items/1")),
		cs("rest wildcard", get("/mux/files/a/b/c.txt")),
		cs("escaped wildcard", get("/mux/items/a%2Fb")),
		cs("{$}", get("/mux/exact/")),
		cs("{$} no match", get("/mux/exact/more")),
		cs("host pattern", rq("GET /mux/host HTTP/1.1", []string{"Host: x.example"}, "")),
	)
	form, formType := multipartBody()
	bigChunked := chunked("/read/none", slices.Repeat([]string{strings.Repeat("c", 10<<10)}, 30), nil)
	oneChunk := chunked("/read/none", []string{strings.Repeat("c", 266000)}, nil)
	add("body",
		cs("Content-Length", post("/echo", "hello")),
		cs("chunked", chunked("/echo", []string{"hel", "lo"}, nil)),
		cs("chunked with extension", rq("POST /echo HTTP/1.1", []string{"Host: x", "Transfer-Encoding: chunked"}, "5;ext=1\r\nhello\r\n0\r\n\r\n")),
		cs("chunked with trailers", chunked("/echo", []string{"hello"}, []string{"X-Sum: 5"}, "Trailer: X-Sum")),
		cs("chunked with trailers, large", chunked("/echo", []string{strings.Repeat("t", 70<<10)}, []string{"X-Sum: 5", "X-Other: 1"}, "Trailer: X-Sum, X-Other")),
		cs("chunked with trailers, in parts", rq("POST /echo HTTP/1.1", []string{"Host: x", "Transfer-Encoding: chunked", "Trailer: X-Sum"}, "5\r\nhello\r\n"+pause+"0\r\nX-Sum: 5\r\n\r\n")),
		cs("chunked with an undeclared trailer", chunked("/echo", []string{"hello"}, []string{"X-Undeclared: 1"})),
		dev(cs("chunked, Trailer: Content-Length", chunked("/echo", []string{"hello"}, []string{"Content-Length: 5"}, "Trailer: Content-Length")), refusal),
		cs("empty, Content-Length 0", post("/echo", "")),
		cs("POST without body", rq("POST /echo HTTP/1.1", []string{"Host: x"}, "")),
		cs("chunked, empty", chunked("/echo", nil, nil)),
		cs("read partially", post("/read/some", strings.Repeat("r", 100))),
		cs("read partially, chunked", chunked("/read/some", []string{"abc", "defghij"}, nil)),
		cs("not read", post("/read/none", strings.Repeat("n", 1000))),
		cs("not read, chunked", chunked("/read/none", []string{"abc", "def"}, nil)),
		noPipe(cs("not read, large", post("/read/none", strings.Repeat("n", 300<<10)))),
		dev(noPipe(cs("not read, large, chunked", bigChunked)), unreadChunkedCloses),
		dev(noPipe(cs("not read, large, chunked, in parts", bigChunked[:1000]+await+bigChunked[1000:])), unreadChunkedCloses),
		dev(noPipe(cs("not read, large, chunked, all sent before the handler returns", chunked("/read/none-later", slices.Repeat([]string{strings.Repeat("c", 10<<10)}, 30), nil))), unreadChunkedCloses),
		// Its first 10,000 bytes in the pipe when the handler returns, the
		// rest in three full reads and a last one that holds the body's
		// end: more than 256 KiB left unread in all.
		dev(noPipe(cs("not read, large, chunked, its end in a large read", oneChunk[:10000]+await+oneChunk[10000:])), unreadChunkedCloses),
		cs("closed unread", post("/read/close", "abc")),
		cs("read past the end", post("/read/past", "hello")),
		cs("read past the end, large", post("/read/past", strings.Repeat("p", 100<<10))),
		cs("read past the end, chunked in parts", rq("POST /read/past HTTP/1.1", []string{"Host: x", "Transfer-Encoding: chunked"}, "5\r\nfirst\r\n"+await+"4\r\nrest\r\n0\r\n\r\n")),
		cs("read large", post("/read/all", strings.Repeat("l", 200<<10))),
		cs("read large, chunked", chunked("/read/all", []string{strings.Repeat("c", 40<<10), strings.Repeat("d", 40<<10)}, nil)),
		noClient(cs("chunked upload in parts", rq("POST /read/first HTTP/1.1", []string{"Host: x", "Transfer-Encoding: chunked"}, "5\r\nfirst\r\n"+await+"4\r\nrest\r\n0\r\n\r\n"))),
		dev(cs("upload in parts", rq("POST /read/first HTTP/1.1", []string{"Host: x", "Content-Length: 9"}, "first"+await+"rest")), smallBodyAwaited),
		cs("Read returns io.EOF with the last bytes", post("/read/first", "hello")),
		// The client writes the last chunk apart: whether it has come
		// with the rest is timing.
		noClient(cs("Read returns io.EOF with the last bytes, chunked", chunked("/read/first", []string{"hel", "lo"}, []string{"X-Sum: 5"}, "Trailer: X-Sum"))),
		cs("Read returns io.EOF with the last bytes, Expect", rq("POST /read/first HTTP/1.1", []string{"Host: x", "Content-Length: 5", "Expect: 100-continue"}, await+"hello")),
		cs("ParseForm query and body", post("/form?a=1&b=2", "b=3&c=4", "Content-Type: application/x-www-form-urlencoded")),
		cs("ParseForm chunked", chunked("/form?a=1", []string{"c=", "4"}, nil, "Content-Type: application/x-www-form-urlencoded")),
		cs("ParseForm bad body", post("/form", "%zz", "Content-Type: application/x-www-form-urlencoded")),
		cs("ParseMultipartForm", post("/multipart", form, "Content-Type: "+formType)),
		dev(cs("MaxBytesReader over", post("/maxbytes", "more than eight bytes")), keptOpen),
	)
	add("expect",
		tagged(cs("read, body after 100", rq("POST /read/all HTTP/1.1", []string{"Host: x", "Content-Length: 5", "Expect: 100-continue"}, await+"hello")), tagContinue),
		dev(cs("read, body at once", post("/read/all", "hello", "Expect: 100-continue")), noContinue),
		tagged(cs("read, chunked", rq("POST /read/all HTTP/1.1", []string{"Host: x", "Transfer-Encoding: chunked", "Expect: 100-continue"}, await+"5\r\nhello\r\n0\r\n\r\n")), tagContinue),
		tagged(cs("read, large", rq("POST /read/all HTTP/1.1", []string{"Host: x", "Content-Length: 100000", "Expect: 100-continue"}, await+strings.Repeat("e", 100000))), tagContinue),
		tagged(cs("ParseForm", rq("POST /form HTTP/1.1", []string{"Host: x", "Content-Length: 3", "Content-Type: application/x-www-form-urlencoded", "Expect: 100-continue"}, await+"a=1")), tagContinue),
		dev(noPipe(cs("not read, body withheld", rq("POST /read/none HTTP/1.1", []string{"Host: x", "Content-Length: 5", "Expect: 100-continue"}, ""))), closesAtOnce),
		cs("not read, body after a while", rq("POST /read/none HTTP/1.1", []string{"Host: x", "Content-Length: 5", "Expect: 100-continue"}, await+"hello")),
		dev(cs("not read, body at once", post("/read/none", "hello", "Expect: 100-continue")), keptOpen),
		cs("read, Connection: close", rq("POST /read/all HTTP/1.1", []string{"Host: x", "Connection: close", "Content-Length: 5", "Expect: 100-continue"}, await+"hello")),
		cs("Content-Length 0", post("/read/all", "", "Expect: 100-continue")),
		dev10(cs("HTTP/1.0", rq("POST /read/all HTTP/1.0", []string{"Content-Length: 5", "Expect: 100-continue"}, "hello"))),
		cs("100 written by the handler", rq("POST /hints/continue HTTP/1.1", []string{"Host: x", "Content-Length: 4", "Expect: 100-continue"}, await+"body")),
		tagged(cs("fields seen", rq("POST /echo HTTP/1.1", []string{"Host: x", "Content-Length: 5", "Expect: 100-continue"}, await+"hello")), tagContinue),
	)
	add("http1.0",
		dev10(cs("GET", rq("GET /hello HTTP/1.0", nil, ""))),
		dev10(cs("GET with Host", rq("GET /hello HTTP/1.0", []string{"Host: x"}, ""))),
		dev10(cs("keep-alive", rq("GET /hello HTTP/1.0", []string{"Connection: keep-alive"}, ""))),
		dev10(cs("keep-alive, large body", rq("GET /size/5000 HTTP/1.0", []string{"Connection: keep-alive"}, ""))),
		dev10(cs("keep-alive, flushed", rq("GET /flush/between HTTP/1.0", []string{"Connection: keep-alive"}, ""))),
		dev10(cs("keep-alive, Content-Length", rq("GET /write/cl-exact HTTP/1.0", []string{"Connection: keep-alive"}, ""))),
		dev10(cs("HEAD", rq("HEAD /hello HTTP/1.0", nil, ""))),
		dev10(cs("POST", rq("POST /echo HTTP/1.0", []string{"Content-Length: 5"}, "hello"))),
		dev10(cs("fields seen", rq("GET /echo HTTP/1.0", []string{"Connection: keep-alive"}, ""))),
		dev10(cs("204 keep-alive", rq("GET /status/204 HTTP/1.0", []string{"Connection: keep-alive"}, ""))),
	)
	add("close",
		cs("GET", get("/hello", "Connection: close")),
		cs("GET, mixed case", get("/hello", "Connection: Close")),
		cs("GET, with keep-alive", get("/hello", "Connection: keep-alive, close")),
		cs("POST", post("/echo", "bye", "Connection: close")),
		cs("large body", get("/size/10000", "Connection: close")),
		cs("flushed", get("/flush/between", "Connection: close")),
		cs("requests after it", get("/hello", "Connection: close")+get("/hello")),
		cs("set by the handler", get("/status/200/x", "X-Unused: 1")+rq("GET /hello HTTP/1.1", []string{"Host: x", "Connection: close"}, "")),
	)
	add("pipelined",
		cs("GET HEAD POST", get("/hello")+head("/size/3000")+post("/echo", "abc")),
		cs("chunked then GET", chunked("/echo", []string{"abc"}, nil)+get("/flush/between")),
		cs("trailers then 204", get("/trailer/declared")+get("/status/204")+get("/sniff/html")),
		cs("FileServer and ranges", get("/fs/a.txt")+get("/content", "Range: bytes=0-3")+get("/fs/dir")),
		cs("1xx then GET", get("/hints/two")+get("/hello")),
		cs("unread bodies", post("/read/none", "aaaa")+post("/read/some", "bbbbbbbb")+get("/hello")),
	)
	add("panic",
		dev(cs("ErrAbortHandler", get("/panic/abort")), panicBeforeOutput),
		dev(cs("value", get("/panic/value")), panicBeforeOutput),
		dev(cs("after a small write", get("/panic/after-write")), panicBeforeOutput),
		dev(cs("after WriteHeader", get("/panic/after-header")), panicBeforeOutput),
		cs("after Flush", get("/panic/after-flush")),
		dev(cs("after a large write", get("/panic/after-large-write")), panicAfterLargeWrite),
	)
	add("context",
		dev(cs("values", get("/ctx")), serverContextValue),
		dev(cs("WithValue", get("/ctx/value")), serverContextValue),
	)
	add("request",
		cs("fields", get("/echo/a?b=c", "User-Agent: suite", "Accept: */*")),
		cs("absolute form", rq("GET http://example.com/echo/abs?q=1 HTTP/1.1", []string{"Host: x"}, "")),
		cs("absolute form, https", rq("GET https://example.com:8443/echo HTTP/1.1", []string{"Host: example.com:8443"}, "")),
		cs("escaped path", get("/echo/a%20b/%7Ec%2Fd")),
		cs("query only", get("/echo?")),
		cs("repeated fields", get("/echo", "X-A: 1", "X-A: 2", "x-a: 3")),
		cs("lower case names", get("/echo", "x-lower: v", "content-type: text/plain")),
		cs("empty value", get("/echo", "X-Empty:")),
		cs("spaces and tabs", get("/echo", "X-Space: \t v  v \t")),
		cs("obs-text", get("/echo", "X-Latin: caf\xe9")),
		cs("underscore in name", get("/echo", "X_Under: v")),
		cs("Host with port", rq("GET /echo HTTP/1.1", []string{"Host: x.example:8080"}, "")),
		cs("empty Host", rq("GET /echo HTTP/1.1", []string{"Host:"}, "")),
		cs("Cookie", get("/echo", "Cookie: a=1; b=2", "Cookie: c=3")),
		cs("Connection tokens", get("/echo", "Connection: keep-alive, X-Hop", "X-Hop: 1")),
		cs("Upgrade h2c", get("/echo", "Connection: Upgrade, HTTP2-Settings", "Upgrade: h2c", "HTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA")),
		cs("Pragma no-cache", get("/echo", "Pragma: no-cache")),
		cs("Content-Length with leading zeros", rq("POST /echo HTTP/1.1", []string{"Host: x", "Content-Length: 005"}, "hello")),
		cs("TE trailers", get("/echo", "TE: trailers")),
		noClient(cs("OPTIONS *", rq("OPTIONS * HTTP/1.1", []string{"Host: x"}, ""))),
		noClient(cs("OPTIONS * with body", rq("OPTIONS * HTTP/1.1", []string{"Host: x", "Content-Length: 3"}, "abc"))),
		cs("OPTIONS path", rq("OPTIONS /echo HTTP/1.1", []string{"Host: x"}, "")),
		cs("custom method", rq("PURGE /echo HTTP/1.1", []string{"Host: x"}, "")),
	)
	add("malformed",
		dev(cs("no Host", rq("GET /hello HTTP/1.1", nil, "")), refusal),
		dev(cs("two Hosts", rq("GET /hello HTTP/1.1", []string{"Host: a", "Host: b"}, "")), refusal),
		dev(cs("differing Content-Lengths", rq("POST /echo HTTP/1.1", []string{"Host: x", "Content-Length: 1", "Content-Length: 2"}, "ab")), refusal),
		dev(cs("space before colon", rq("GET /hello HTTP/1.1", []string{"Host: x", "X-Bad : v"}, "")), refusal),
		dev(cs("space in name", rq("GET /hello HTTP/1.1", []string{"Host: x", "X Bad: v"}, "")), refusal),
		dev(cs("bad request line", "GET /hello\r\nHost: x\r\n\r\n"), refusal),
		dev(cs("bad version", rq("GET /hello HTTP/x.y", []string{"Host: x"}, "")), refusal),
		dev(cs("unsupported Transfer-Encoding", rq("POST /echo HTTP/1.1", []string{"Host: x", "Transfer-Encoding: gzip"}, "")), refusal),
		dev(cs("header too long", rq("GET /hello HTTP/1.1", []string{"Host: x", "X-Long: " + strings.Repeat("l", 100<<10)}, "")), refusal),
		dev(cs("control character in value", rq("GET /hello HTTP/1.1", []string{"Host: x", "X-Bad: a\x01b"}, "")), refusal),
		dev(cs("HTTP/2 version", rq("GET /hello HTTP/2.0", []string{"Host: x"}, "")), refusal),
	)
	add("limits",
		dev(cs("long target", get("/hello/"+strings.Repeat("t", 9000))), httpdRefuses(414)),
		dev(cs("many fields", rq("GET /hello HTTP/1.1", append([]string{"Host: x"}, strings.Split(strings.Repeat("X-F: v\n", 150), "\n")[:150]...), "")), httpdRefuses(431)),
		dev(cs("Content-Length with Transfer-Encoding", rq("POST /echo HTTP/1.1", []string{"Host: x", "Content-Length: 5", "Transfer-Encoding: chunked"}, "5\r\nhello\r\n0\r\n\r\n")), httpdRefuses(400)),
		dev(cs("bare LF", "GET /hello HTTP/1.1\nHost: x\n\n"), httpdRefuses(400)),
	)
	return cases
}

// http10: httpd's status line says HTTP/1.1 to an HTTP/1.0 client
// (RFC 9112 section 2.3), and its "Connection: close" says what
// net/http leaves implied; the rest is as net/http's.
func http10(std, ours wireResult) string {
	for i, x := range std.Resps {
		if !strings.HasPrefix(x.Status, "HTTP/1.0 ") {
			return fmt.Sprintf("net/http's status line %d: %q, want HTTP/1.0", i, x.Status)
		}
	}
	if len(std.Resps) != len(ours.Resps) {
		return "not as many responses"
	}
	var want wireResult = std
	want.Resps = nil
	for i, x := range std.Resps {
		x.Status = "HTTP/1.1" + strings.TrimPrefix(x.Status, "HTTP/1.0")
		x.Header = x.Header.Clone()
		if x.Header.Get("Connection") == "" && ours.Resps[i].Header.Get("Connection") == "close" && std.Closed && i == len(std.Resps)-1 {
			x.Header.Set("Connection", "close")
		}
		want.Resps = append(want.Resps, x)
	}
	if !reflect.DeepEqual(want, ours) {
		return "httpd's answer is not net/http's with HTTP/1.1 and Connection: close"
	}
	return ""
}

// panicBeforeOutput: a handler that panics before its response leaves
// gets a 500 from httpd, and the connection closed; net/http closes it
// without a response.
func panicBeforeOutput(std, ours wireResult) string {
	if len(std.Resps) != 0 || !std.Closed {
		return "net/http did not close without a response"
	}
	if len(ours.Resps) != 1 || !ours.Closed || !strings.HasPrefix(ours.Resps[0].Status, "HTTP/1.1 500 ") ||
		ours.Resps[0].Header.Get("Connection") != "close" || ours.Resps[0].Body != "Internal Server Error\n" {
		return "httpd did not answer 500 with Connection: close and close"
	}
	return ""
}

// serverContextValue: http.ServerContextKey's value is the *httpd.Server
// (there is no *http.Server); all else is as net/http's.
func serverContextValue(std, ours wireResult) string {
	if len(std.Resps) != len(ours.Resps) {
		return "not as many responses"
	}
	want := std
	want.Resps = nil
	for _, x := range std.Resps {
		if !strings.Contains(x.Body, "server *http.Server\n") {
			return "net/http's value is not its *http.Server"
		}
		x.Body = strings.Replace(x.Body, "*http.Server", "*httpd.Server", 1)
		x.Header = x.Header.Clone()
		x.Header.Set("Content-Length", fmt.Sprint(len(x.Body)))
		want.Resps = append(want.Resps, x)
	}
	if !reflect.DeepEqual(want, ours) {
		return "httpd's answer is not net/http's with its *httpd.Server"
	}
	return ""
}

// unreadChunkedCloses: a chunked body left unread beyond 256 KiB closes
// the connection after the response, which says "Connection: close" in
// net/http, where httpd's response went out while the body was still
// coming (always full duplex) and did not say it.
func unreadChunkedCloses(std, ours wireResult) string {
	if len(std.Resps) != 1 || std.Resps[0].Header.Get("Connection") != "close" || !std.Closed {
		return "net/http did not say Connection: close and close"
	}
	want := std
	want.Resps = []wireResp{std.Resps[0]}
	want.Resps[0].Header = std.Resps[0].Header.Clone()
	want.Resps[0].Header.Del("Connection")
	if !reflect.DeepEqual(want, ours) {
		return "httpd's response is not net/http's without Connection: close, then closed"
	}
	return ""
}

// smallBodyAwaited: a Content-Length body of up to 64 KiB is awaited
// whole before its handler runs (inline), so that its first Read returns
// all of it, where net/http's returns the part that had come.
func smallBodyAwaited(std, ours wireResult) string {
	if len(std.Resps) != 1 || std.Resps[0].Body != "first \"first\" <nil>\nrest \"rest\" <nil>" {
		return "net/http's first Read did not return the first part alone"
	}
	want := std
	want.Resps = []wireResp{std.Resps[0]}
	want.Resps[0].Body = "first \"firstrest\" EOF\nrest \"\" <nil>"
	if !reflect.DeepEqual(want, ours) {
		return "httpd's first Read did not return the whole body"
	}
	return ""
}

// keptOpen: net/http answers and closes with "Connection: close" (a
// MaxBytesReader over its limit; an Expect: 100-continue body that came
// with its head, unread), httpd answers alike without it to every
// request, and keeps the connection.
func keptOpen(std, ours wireResult) string {
	if len(std.Resps) != 1 || std.Resps[0].Header.Get("Connection") != "close" || !std.Closed {
		return "net/http did not say Connection: close and close"
	}
	want := std.Resps[0]
	want.Header = want.Header.Clone()
	want.Header.Del("Connection")
	if len(ours.Resps) == 0 || ours.Closed || ours.Extra != "" {
		return "httpd did not answer and keep the connection"
	}
	for _, x := range ours.Resps {
		if !reflect.DeepEqual(want, x) {
			return "httpd's response is not net/http's without Connection: close"
		}
	}
	return ""
}

// noContinue: an Expect: 100-continue body that came with its head gets
// no 100 Continue from httpd (RFC 9110 section 10.1.1); net/http sends
// one when the handler reads. The rest is as net/http's.
func noContinue(std, ours wireResult) string {
	want := std
	want.Resps = nil
	for _, x := range std.Resps {
		if statusCode(x.Status) != 100 {
			want.Resps = append(want.Resps, x)
		}
	}
	if len(want.Resps) == len(std.Resps) {
		return "net/http sent no 100 Continue"
	}
	if !reflect.DeepEqual(want, ours) {
		return "httpd's answer is not net/http's without its 100 Continue"
	}
	return ""
}

// closesAtOnce: an Expect: 100-continue body neither asked for nor sent
// is not awaited: httpd closes after the response that says
// "Connection: close", as net/http's does.
func closesAtOnce(std, ours wireResult) string {
	if len(std.Resps) != 1 || std.Resps[0].Header.Get("Connection") != "close" {
		return "net/http did not say Connection: close"
	}
	if !reflect.DeepEqual(std.Resps, ours.Resps) || !ours.Closed || ours.Extra != "" {
		return "httpd did not answer as net/http and close"
	}
	return ""
}

// panicAfterLargeWrite: a handler panics after one write of 3,000 bytes:
// net/http has sent the first 2,048 (its buffer), httpd all of them;
// either way the chunked body ends without its last chunk.
func panicAfterLargeWrite(std, ours wireResult) string {
	if len(std.Resps) != 1 || std.Resps[0].Body != strings.Repeat("p", 2048) || std.Resps[0].Err == "" {
		return "net/http did not send 2,048 bytes of a body cut short"
	}
	want := std
	want.Resps = []wireResp{std.Resps[0]}
	want.Resps[0].Body = strings.Repeat("p", 3000)
	if !reflect.DeepEqual(want, ours) {
		return "httpd did not send all 3,000 bytes of a body cut short"
	}
	return ""
}

// refusal: a request both refuse, with one status and the connection
// closed. httpd's refusal carries a Date and a Content-Length, and its
// own text.
func refusal(std, ours wireResult) string {
	if len(std.Resps) != 1 || len(ours.Resps) != 1 {
		return "want one response from each"
	}
	s, o := std.Resps[0], ours.Resps[0]
	switch {
	case statusCode(s.Status) != statusCode(o.Status):
		return "status codes differ" // net/http puts its reason in the phrase
	case statusCode(s.Status) < 400:
		return "not refused"
	case !std.Closed || !ours.Closed:
		return "connection not closed"
	case o.Header.Get("Connection") != "close":
		return "httpd's refusal without Connection: close"
	case o.Header.Get("Date") == "" || o.Framing != "length":
		return "httpd's refusal without a Date and a Content-Length"
	}
	return ""
}

// httpdRefuses: a request net/http serves and httpd refuses with status,
// as its package doc says (stricter parsing, lower limits), closing the
// connection.
func httpdRefuses(status int) func(std, ours wireResult) string {
	return func(std, ours wireResult) string {
		if len(std.Resps) == 0 || statusCode(std.Resps[0].Status) == status {
			return "net/http did not serve it"
		}
		if len(ours.Resps) != 1 || statusCode(ours.Resps[0].Status) != status || !ours.Closed ||
			ours.Resps[0].Header.Get("Date") == "" || ours.Resps[0].Header.Get("Connection") != "close" {
			return fmt.Sprintf("httpd did not refuse it with %d and close", status)
		}
		return ""
	}
}
