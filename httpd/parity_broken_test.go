//go:build linux

package httpd_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// The suite must catch a broken httpd. A byte-level proxy in front of
// httpd makes broken copies of it: one that drops the trailers of its
// chunked responses, one that answers HEAD as GET, one that never sends
// 100 Continue. The suite's comparison, run on each, must report the
// cases tagged for the fault; run on the proxy breaking nothing, it must
// report what it reports on httpd itself.

type breakage int

const (
	breakNothing breakage = iota
	dropTrailers          // chunked responses end without their trailers
	headAsGet             // a HEAD request reaches httpd as a GET
	dropContinue          // 100 Continue responses are not passed on
	breakageCount
)

func (b breakage) String() string {
	return [...]string{"transparent", "trailers dropped", "HEAD as GET", "100 Continue dropped"}[b]
}

// tag is the tag of the cases that must catch b.
func (b breakage) tag() string {
	return [...]string{"", tagTrailers, tagHead, tagContinue}[b]
}

// brokenProxy listens on loopback and relays each connection to backend,
// framing requests and responses to break them as b says. It returns its
// address.
func brokenProxy(t testing.TB, backend string, b breakage) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	var wg sync.WaitGroup
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			cc, err := l.Accept()
			if err != nil {
				return
			}
			sc, err := net.Dial("tcp", backend)
			if err != nil {
				cc.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, cc, sc)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				relay(cc.(*net.TCPConn), sc.(*net.TCPConn), b)
			}()
		}
	}()
	return l.Addr().String()
}

// relay carries one connection: requests from cc to sc, responses back.
func relay(cc, sc *net.TCPConn, b breakage) {
	methods := make(chan string, 1024) // as the server saw them, in order
	done := make(chan struct{})
	go func() {
		defer close(done)
		relayRequests(cc, sc, b, methods)
	}()
	relayResponses(sc, cc, b, methods)
	<-done
	cc.Close()
	sc.Close()
}

// relayer copies from a reader to a writer, holding what it writes until
// the reader has nothing more at hand: the bytes a peer sent in one
// write go on in one, so that the server sees them arrive as without
// the proxy.
type relayer struct {
	r *bufio.Reader
	w *bufio.Writer
}

func newRelayer(from io.Reader, to io.Writer) *relayer {
	return &relayer{bufio.NewReaderSize(from, 64<<10), bufio.NewWriterSize(to, 64<<10)}
}

// line reads a line (with its end), flushing first if it would wait.
func (r *relayer) line() (string, error) {
	if r.r.Buffered() == 0 {
		if err := r.w.Flush(); err != nil {
			return "", err
		}
	}
	return r.r.ReadString('\n')
}

// copyN relays n bytes.
func (r *relayer) copyN(n int64) error {
	for n > 0 {
		if r.r.Buffered() == 0 {
			if err := r.w.Flush(); err != nil {
				return err
			}
		}
		if _, err := r.r.Peek(1); err != nil {
			return err
		}
		k := min(int64(r.r.Buffered()), n)
		p, _ := r.r.Peek(int(k))
		if _, err := r.w.Write(p); err != nil {
			return err
		}
		r.r.Discard(int(k))
		n -= k
	}
	return nil
}

// rest relays everything up to the end of the input.
func (r *relayer) rest() error {
	for {
		if err := r.copyN(1 << 30); err != nil {
			if err == io.EOF {
				return r.w.Flush()
			}
			return err
		}
	}
}

// head reads a message head: its lines, and the framing of its body.
func (r *relayer) head() (lines []string, length int64, chunked bool, err error) {
	length = -1
	for {
		line, err := r.line()
		if err != nil {
			return lines, 0, false, err
		}
		lines = append(lines, line)
		if len(lines) > 1 && strings.TrimRight(line, "\r\n") == "" {
			return lines, length, chunked, nil
		}
		name, value, ok := strings.Cut(line, ":")
		value = strings.TrimSpace(value)
		switch {
		case !ok || len(lines) == 1:
		case strings.EqualFold(name, "Content-Length"):
			if n, err := strconv.ParseInt(value, 10, 64); err == nil && length < 0 {
				length = n
			} else {
				return lines, 0, false, errUnframed
			}
		case strings.EqualFold(name, "Transfer-Encoding"):
			chunked = strings.EqualFold(value, "chunked")
			if !chunked {
				return lines, 0, false, errUnframed
			}
		}
	}
}

var errUnframed = errors.New("a framing the proxy leaves to the server")

// chunks relays a chunked body; with dropTrailer, the trailer section's
// fields are not passed on.
func (r *relayer) chunks(dropTrailer bool) error {
	for {
		line, err := r.line()
		if err != nil {
			return err
		}
		r.w.WriteString(line)
		size, _, _ := strings.Cut(strings.TrimSpace(line), ";")
		n, err := strconv.ParseInt(size, 16, 64)
		if err != nil {
			return errUnframed
		}
		if n == 0 {
			break
		}
		if err := r.copyN(n + 2); err != nil { // the data and its CRLF
			return err
		}
	}
	for {
		line, err := r.line()
		if err != nil {
			return err
		}
		if strings.TrimRight(line, "\r\n") == "" {
			r.w.WriteString(line)
			return nil
		}
		if !dropTrailer {
			r.w.WriteString(line)
		}
	}
}

func (r *relayer) write(lines []string) {
	for _, l := range lines {
		r.w.WriteString(l)
	}
}

// relayRequests relays requests, telling relayResponses their methods.
func relayRequests(cc, sc *net.TCPConn, b breakage, methods chan<- string) {
	r := newRelayer(cc, sc)
	defer func() {
		r.w.Flush()
		sc.CloseWrite()
		io.Copy(io.Discard, cc) // until the client closes
	}()
	for {
		lines, length, chunked, err := r.head()
		if len(lines) == 0 {
			return
		}
		method, _, _ := strings.Cut(lines[0], " ")
		if b == headAsGet && method == "HEAD" {
			lines[0] = "GET" + strings.TrimPrefix(lines[0], "HEAD")
			method = "GET"
		}
		methods <- method // before the server can answer
		r.write(lines)
		switch {
		case err != nil:
			r.rest() // what the server makes of it is the server's
			return
		case chunked:
			err = r.chunks(false)
		case length > 0:
			err = r.copyN(length)
		}
		if err != nil {
			r.rest()
			return
		}
	}
}

// relayResponses relays responses, framed by the methods of their
// requests, until the server's side ends.
func relayResponses(sc, cc *net.TCPConn, b breakage, methods <-chan string) {
	r := newRelayer(sc, cc)
	defer func() {
		r.w.Flush()
		// A reset is passed on as a close: the suite takes one for the
		// other (isReset), and a reset could lose what the client has
		// not read yet.
		cc.CloseWrite()
	}()
	for {
		lines, length, chunked, err := r.head()
		if err != nil && len(lines) == 0 {
			return
		}
		code := statusCode(strings.TrimRight(lines[0], "\r\n"))
		if !(b == dropContinue && code == 100) {
			r.write(lines)
		}
		if err != nil {
			r.rest()
			return
		}
		if code >= 100 && code <= 199 && code != 101 {
			continue // the final response follows
		}
		method := "GET" // a response to no request the proxy framed
		select {
		case method = <-methods:
		default:
		}
		switch {
		case code == 101:
			r.rest()
			return
		case method == "HEAD" || code == 204 || code == 304:
		case chunked:
			err = r.chunks(b == dropTrailers)
		case length >= 0:
			err = r.copyN(length)
		default:
			r.rest() // ended by the close
			return
		}
		if err != nil {
			return
		}
	}
}

// TestParityCatchesBrokenCopies runs the suite's wire comparison on
// httpd through the proxy, breaking it in each way: each broken copy
// must differ from net/http in every case tagged for its fault, and the
// proxy breaking nothing in no case where httpd itself does not.
func TestParityCatchesBrokenCopies(t *testing.T) {
	t.Parallel()
	// Each case once: pipelining adds nothing to what the proxy breaks.
	cases := selectCases(t, suiteCases())
	for i := range cases {
		cases[i].noPipeline = true
	}
	plain, _ := suiteServers(t, suiteHandler(t), nil)
	var runs []*wireRun
	direct := wireRuns(cases, plain, "")
	runs = append(runs, direct...)
	byBreakage := make([][]*wireRun, breakageCount)
	for b := range breakageCount {
		pair := plain
		pair.ours = brokenProxy(t, plain.ours, b)
		byBreakage[b] = wireRuns(cases, pair, "")
		for _, r := range byBreakage[b] {
			r.once = b != breakNothing
		}
		runs = append(runs, byBreakage[b]...)
	}
	runWire(runs)

	differsDirect := map[string]bool{}
	for _, r := range direct {
		differsDirect[r.name] = r.diff != ""
	}
	for b := range breakageCount {
		var caught, missed []string
		for _, r := range byBreakage[b] {
			switch {
			case b == breakNothing && r.diff != "" && !differsDirect[r.name]:
				t.Errorf("%v: %s: differs through the proxy only: %s", b, r.name, r.diff)
			case b == breakNothing:
			case r.diff != "" && !differsDirect[r.name]:
				caught = append(caught, r.name)
			case slices.Contains(r.c.tags, b.tag()) && !differsDirect[r.name]:
				missed = append(missed, r.name)
			}
		}
		if b == breakNothing {
			continue
		}
		if len(missed) > 0 || len(caught) == 0 {
			t.Errorf("%v: not caught by %q", b, missed)
		}
		t.Logf("%v: caught by %d runs: %q", b, len(caught), caught)
	}
}
