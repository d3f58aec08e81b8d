//go:build linux

package httpd_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/textproto"
	"os"
	"reflect"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gracepoll/gracepoll/httpd"
)

// Differential tests: the same handler served by net/http's server and
// by httpd.Server, the same raw request bytes sent to both over TCP, and
// the responses compared: status line, header fields (Date by presence
// only), body with its framing removed, trailers, and whether the server
// closed the connection after them. parityCase is the unit: add cases to
// the tables below, or call checkParity from a test of your own. The
// suite of parity_suite_test.go runs its cases over TLS too, pipelined,
// and through net/http's client.

// wireResp is one response as read from the wire.
type wireResp struct {
	Status  string      // the status line
	Header  http.Header // as sent, duplicates kept; Date's value is "<date>"
	Framing string      // "length", "chunked", "close" or "none"
	Body    string      // de-framed
	Trailer http.Header // after a chunked body
	Err     string      // a framing error, if any
}

// wireResult is what a server sent for a run of requests.
type wireResult struct {
	Resps  []wireResp
	Extra  string // bytes after the last expected response
	Closed bool   // the server closed the connection after them
}

func (r wireResult) String() string {
	var b strings.Builder
	for i, x := range r.Resps {
		fmt.Fprintf(&b, "  [%d] %s\n      header %v\n      framing %s body %s trailer %v err %q\n", i, x.Status, x.Header, x.Framing, shorten(x.Body), x.Trailer, x.Err)
	}
	fmt.Fprintf(&b, "  extra %s closed %v", shorten(r.Extra), r.Closed)
	return b.String()
}

// shorten quotes s, its middle cut if long.
func shorten(s string) string {
	if len(s) <= 600 {
		return strconv.Quote(s)
	}
	return fmt.Sprintf("%q...(%d bytes)...%q", s[:500], len(s)-600, s[len(s)-100:])
}

// parityCase is a handler and the raw bytes sent to it.
type parityCase struct {
	name    string
	handler http.HandlerFunc
	raw     string // one or more requests, pipelined
	// ignore lists header fields not compared (besides Date's value);
	// ignoreBody leaves bodies uncompared (a refusal's text).
	ignore     []string
	ignoreBody bool
	// ignoreVersion compares status lines without their version: net/http
	// answers an HTTP/1.0 request with HTTP/1.0, httpd with HTTP/1.1
	// (RFC 9112 section 2.3), and says Connection: close where net/http
	// leaves it implied (list "Connection" in ignore too).
	ignoreVersion bool
}

// requestMethods returns the methods of the requests in raw, to know how
// many responses to read and which have no body (HEAD); a head that does
// not parse counts as one GET.
func requestMethods(raw string) []string {
	br := bufio.NewReader(strings.NewReader(raw))
	var methods []string
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			break
		}
		io.Copy(io.Discard, req.Body)
		methods = append(methods, req.Method)
	}
	if len(methods) == 0 {
		methods = []string{"GET"}
	}
	return methods
}

// exchange sends raw to addr and reads the responses to it.
func exchange(t testing.TB, addr, raw string) wireResult {
	t.Helper()
	return exchangeOn(rawConn(t, addr), raw, 150*time.Millisecond, timeout)
}

// pause in a case's raw bytes splits them: what follows is sent 100 ms
// after what precedes, as an upload arrives in parts.
const pause = "<pause>"

// await splits them too: what follows is sent once the server has sent
// something more (a 100 Continue, a response while the body is still
// coming), or after awaitTimeout if it sends nothing, as a client sends
// a body after 100 Continue or its timeout.
const await = "<await>"

// awaitTimeout is long: a server that is slow to answer on a loaded
// machine would see what follows an await with what precedes it.
const awaitTimeout = 3 * time.Second

// splitRaw splits raw at its pauses and awaits: parts[i] follows seps[i].
func splitRaw(raw string) (parts, seps []string) {
	for {
		i, sep := strings.Index(raw, pause), pause
		if j := strings.Index(raw, await); j >= 0 && (i < 0 || j < i) {
			i, sep = j, await
		}
		if i < 0 {
			return append(parts, raw), seps
		}
		parts, seps = append(parts, raw[:i]), append(seps, sep)
		raw = raw[i+len(sep):]
	}
}

// exchangeOn is exchange on a connection of the caller's (TLS, say),
// closed when it returns; settle is how long it waits after the last
// response for the server to close, limit how long the whole may take.
func exchangeOn(c net.Conn, raw string, settle, limit time.Duration) wireResult {
	defer c.Close()
	c.SetDeadline(time.Now().Add(limit))
	parts, seps := splitRaw(raw)
	cr := &countingReader{r: c, more: make(chan struct{}, 1)}
	go func() {
		// Writes run beside the reads: a server may answer (or close)
		// before it has everything, and an await waits for it.
		for i, p := range parts {
			switch {
			case i == 0:
			case seps[i-1] == pause:
				time.Sleep(100 * time.Millisecond)
			default:
				cr.wait(awaitTimeout)
			}
			n := cr.n.Load()
			if _, err := io.WriteString(c, p); err != nil {
				return // the server closed: what it sent is read below
			}
			cr.since = n
		}
	}()
	br := bufio.NewReader(cr)
	var res wireResult
	for _, m := range requestMethods(strings.Join(parts, "")) {
		for {
			x, closed := readWireResp(br, m)
			if x.Status != "" || x.Err != "" {
				res.Resps = append(res.Resps, x)
			}
			if closed {
				res.Closed = true
				return res
			}
			if x.Err != "" {
				return res
			}
			if code := statusCode(x.Status); code >= 100 && code <= 199 && code != 101 {
				continue // an informational response: the final one follows
			}
			break
		}
	}
	c.SetReadDeadline(time.Now().Add(settle))
	extra, err := io.ReadAll(br)
	res.Extra = string(extra)
	res.Closed = err == nil || isReset(err)
	if err != nil && !res.Closed && !errors.Is(err, os.ErrDeadlineExceeded) {
		res.Extra += " (" + err.Error() + ")"
	}
	return res
}

// countingReader counts what it reads, for a writer waiting for the
// server to send more.
type countingReader struct {
	r     io.Reader
	n     atomic.Int64
	more  chan struct{} // a read returned bytes
	since int64         // the writer's: the count when it last wrote
}

func (cr *countingReader) Read(p []byte) (int, error) {
	n, err := cr.r.Read(p)
	if n > 0 {
		cr.n.Add(int64(n))
		select {
		case cr.more <- struct{}{}:
		default:
		}
	}
	return n, err
}

// wait waits until more than cr.since has been read, or d.
func (cr *countingReader) wait(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	for cr.n.Load() <= cr.since {
		select {
		case <-cr.more:
		case <-t.C:
			return
		}
	}
}

// isReset reports a connection reset: a server that closes with input
// unread resets, or not, as the input happens to arrive, so a reset counts
// as a close.
func isReset(err error) bool { return errors.Is(err, syscall.ECONNRESET) }

func statusCode(line string) int {
	_, rest, _ := strings.Cut(line, " ")
	code, _ := strconv.Atoi(strings.SplitN(rest, " ", 2)[0])
	return code
}

// readWireResp reads one response to a request with method m; closed
// reports a body that ended with the connection (or a connection that
// ended before a response).
func readWireResp(br *bufio.Reader, m string) (x wireResp, closed bool) {
	tp := textproto.NewReader(br)
	line, err := tp.ReadLine()
	if err != nil {
		if err == io.EOF || isReset(err) {
			return x, true
		}
		x.Err = "status line: " + err.Error()
		return x, false
	}
	x.Status = line
	h, err := tp.ReadMIMEHeader()
	x.Header = http.Header(h)
	if err != nil {
		x.Err = "header: " + err.Error()
		return x, false
	}
	if _, ok := x.Header["Date"]; ok {
		x.Header["Date"] = []string{"<date>"}
	}
	code := statusCode(line)
	te := x.Header.Values("Transfer-Encoding")
	var body io.Reader
	switch {
	case m == "HEAD" || code >= 100 && code <= 199 || code == 204 || code == 304:
		x.Framing = "none"
		return x, false
	case len(te) > 0 && strings.EqualFold(strings.TrimSpace(te[len(te)-1]), "chunked"):
		x.Framing = "chunked"
		body = httputil.NewChunkedReader(br)
	case len(x.Header.Values("Content-Length")) > 0:
		x.Framing = "length"
		n, err := strconv.ParseInt(x.Header.Values("Content-Length")[0], 10, 64)
		if err != nil {
			x.Err = "content-length: " + err.Error()
			return x, false
		}
		body = io.LimitReader(br, n)
	default:
		x.Framing = "close"
		b, err := io.ReadAll(br)
		x.Body = string(b)
		if err != nil {
			x.Err = "body: " + err.Error()
		}
		return x, true
	}
	b, err := io.ReadAll(body)
	x.Body = string(b)
	if err != nil {
		x.Err = "body: " + err.Error()
		return x, false
	}
	if x.Framing == "chunked" {
		tr, err := tp.ReadMIMEHeader()
		if len(tr) > 0 {
			x.Trailer = http.Header(tr)
		}
		if err != nil {
			x.Err = "trailer: " + err.Error()
		}
	}
	return x, false
}

// serveBoth serves h with net/http's server and with httpd.Server, and
// returns their addresses.
func serveBoth(t testing.TB, h http.Handler) (std, ours string) {
	t.Helper()
	return serveBothWith(t, &httpd.Server{Handler: h}, nil)
}

// serveBothWith is serveBoth with the servers' fields set: ours's, whose
// Handler both serve, and net/http's by config (if not nil) before it
// starts.
func serveBothWith(t testing.TB, ours *httpd.Server, config func(*http.Server)) (stdAddr, ourAddr string) {
	t.Helper()
	ts := httptest.NewUnstartedServer(ours.Handler)
	ts.Config.ErrorLog = log.New(io.Discard, "", 0)
	if config != nil {
		config(ts.Config)
	}
	ts.Start()
	t.Cleanup(ts.Close)
	return ts.Listener.Addr().String(), serve(t, ours)
}

// parity sends c.raw to both servers and returns what each sent.
func parity(t testing.TB, c parityCase) (std, ours wireResult) {
	t.Helper()
	stdAddr, ourAddr := serveBoth(t, c.handler)
	return exchange(t, stdAddr, c.raw), exchange(t, ourAddr, c.raw)
}

// checkParity fails t if the two servers' responses to c differ.
func checkParity(t *testing.T, c parityCase) (std, ours wireResult) {
	t.Helper()
	std, ours = parity(t, c)
	a, b := normalize(std, c), normalize(ours, c)
	if !reflect.DeepEqual(a, b) {
		t.Errorf("%s: responses differ\nnet/http:\n%v\nhttpd:\n%v", c.name, std, ours)
	}
	return std, ours
}

func normalize(r wireResult, c parityCase) wireResult {
	out := wireResult{Extra: r.Extra, Closed: r.Closed}
	for _, x := range r.Resps {
		x.Header = x.Header.Clone()
		for _, k := range c.ignore {
			x.Header.Del(k)
		}
		if c.ignoreBody {
			x.Body = ""
		}
		if c.ignoreVersion {
			_, x.Status, _ = strings.Cut(x.Status, " ")
		}
		out.Resps = append(out.Resps, x)
	}
	return out
}

const getReq = "GET / HTTP/1.1\r\nHost: x\r\n\r\n"

func runParity(t *testing.T, cases []parityCase) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			checkParity(t, c)
		})
	}
}
