//go:build linux

package httpd_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/textproto"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gracepoll/gracepoll/httpd"
	"github.com/gracepoll/gracepoll/internal/selfsigned"
)

// The differential suite: the cases of suiteCases (parity_cases_test.go),
// each a raw request (or several) to a path of suiteHandler, sent to
// net/http's server and to httpd.Server over TCP and over TLS, each once
// and pipelined (the request twice on one connection), in runs mixing
// cases on one connection, and through net/http's client. Both servers
// run one handler for all cases, so a pair of servers serves the suite.

var suiteOnly = flag.String("parity.case", "", "run only the parity suite's cases matching this regexp")

// suiteCase is a case of the suite.
type suiteCase struct {
	parityCase // handler unused: suiteHandler routes by path
	// tags name the broken copies of httpd (parity_broken_test.go) that
	// this case must catch.
	tags []string
	// noPipeline: the request is not sent twice on one connection (its
	// bytes are not a whole request, say). Nor is one with an await.
	noPipeline bool
	// noClient: not sent through net/http's client, which cannot send it
	// or would send another request.
	noClient bool
	// deviation, for a documented difference, replaces the comparison:
	// it checks the behaviour each server documents and returns what is
	// wrong, or "".
	deviation func(std, ours wireResult) string
}

// serverPair is net/http's server and httpd's serving the same handler,
// plain or with TLS (client is the client's TLS configuration).
type serverPair struct {
	std, ours string
	client    *tls.Config
	h2        bool // the client speaks HTTP/2: by ALPN over TLS, h2c otherwise
}

func (p serverPair) dial(addr string) (net.Conn, error) {
	if p.client != nil {
		return tls.DialWithDialer(&net.Dialer{Timeout: timeout}, "tcp", addr, p.client)
	}
	return net.DialTimeout("tcp", addr, timeout)
}

// suiteServers starts the suite's server pairs: plain and TLS, with one
// certificate; net/http's offers only http/1.1 in ALPN, as httpd does.
func suiteServers(t testing.TB, h http.Handler, cfg func(*http.Server, *httpd.Server)) (plain, tlsPair serverPair) {
	t.Helper()
	cert, err := selfsigned.New()
	if err != nil {
		t.Fatal(err)
	}
	start := func(useTLS bool) serverPair {
		ts := httptest.NewUnstartedServer(h)
		ts.Config.ErrorLog = log.New(io.Discard, "", 0)
		ts.Config.MaxHeaderBytes = httpd.DefaultMaxHeaderBytes
		srv := &httpd.Server{Handler: h}
		if cfg != nil {
			cfg(ts.Config, srv)
		}
		var p serverPair
		if useTLS {
			ts.TLS = &tls.Config{Certificates: []tls.Certificate{cert.TLS}, NextProtos: []string{"http/1.1"}}
			ts.StartTLS()
			srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert.TLS}}
			p.client = &tls.Config{RootCAs: cert.Pool(), NextProtos: []string{"http/1.1"}}
		} else {
			ts.Start()
		}
		t.Cleanup(ts.Close)
		p.std, p.ours = ts.Listener.Addr().String(), serve(t, srv)
		return p
	}
	return start(false), start(true)
}

// wireRun is one exchange of raw bytes with both servers of a pair.
type wireRun struct {
	name      string
	c         suiteCase
	pair      serverPair
	std, ours wireResult
	diff      string
	// once: a difference is not checked again with suiteSettleSlow (a
	// broken copy's, expected).
	once bool
}

// suiteSettle is how long an exchange waits after the last response for a
// close; a run that differs is repeated (twice at most) with
// suiteSettleSlow, in case a close or an interim response came late on a
// loaded machine.
const (
	suiteSettle     = 150 * time.Millisecond
	suiteSettleSlow = time.Second
	suiteParallel   = 48
	// suiteLimit bounds an exchange: a response misframed (by a broken
	// copy) can leave the reader waiting for bytes that never come.
	suiteLimit = 6 * time.Second
)

// runWire runs the exchanges of runs, suiteParallel at once: most of an
// exchange is waiting for a close that does not come.
func runWire(runs []*wireRun) {
	sem := make(chan struct{}, suiteParallel)
	var wg sync.WaitGroup
	for _, r := range runs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			r.std, r.ours, r.diff = exchangePair(r.c, r.pair, suiteSettle)
			for try := 0; r.diff != "" && !r.once && try < 2; try++ {
				r.std, r.ours, r.diff = exchangePair(r.c, r.pair, suiteSettleSlow)
			}
		}()
	}
	wg.Wait()
}

// exchangePair sends c.raw to both servers of p at once and compares.
func exchangePair(c suiteCase, p serverPair, settle time.Duration) (std, ours wireResult, diff string) {
	var wg sync.WaitGroup
	one := func(addr string, res *wireResult) {
		defer wg.Done()
		conn, err := p.dial(addr)
		if err != nil {
			res.Extra = "dial: " + err.Error()
			return
		}
		*res = exchangeOn(conn, c.raw, settle, suiteLimit)
	}
	wg.Add(2)
	go one(p.std, &std)
	go one(p.ours, &ours)
	wg.Wait()
	return std, ours, compareWire(c, std, ours)
}

// compareWire is the suite's comparison of what the two servers sent for
// c: "" if they agree (or, for a documented deviation, each did what it
// documents).
func compareWire(c suiteCase, std, ours wireResult) string {
	if c.deviation != nil {
		if d := c.deviation(std, ours); d != "" {
			return fmt.Sprintf("%s\nnet/http:\n%v\nhttpd:\n%v", d, std, ours)
		}
		return ""
	}
	if a, b := normalize(std, c.parityCase), normalize(ours, c.parityCase); !reflect.DeepEqual(a, b) {
		return fmt.Sprintf("responses differ\nnet/http:\n%v\nhttpd:\n%v", std, ours)
	}
	return ""
}

// wireRuns makes the runs of cases on pair: each case once and, unless
// it says not, pipelined (its bytes twice on one connection).
func wireRuns(cases []suiteCase, pair serverPair, prefix string) []*wireRun {
	var runs []*wireRun
	for _, c := range cases {
		runs = append(runs, &wireRun{name: prefix + c.name, c: c, pair: pair})
		// An await waits for the server to answer: pipelined, the answer
		// to the request before would end it too soon.
		if !c.noPipeline && !strings.Contains(c.raw, await) {
			p := c
			p.raw = c.raw + c.raw
			runs = append(runs, &wireRun{name: prefix + c.name + " (pipelined)", c: p, pair: pair})
		}
	}
	return runs
}

// mixedRuns makes runs of several cases on one connection, pipelined:
// the cases that compare as a whole (no field ignored, no pause or
// await, one request) and keep the connection open, per the runs done.
func mixedRuns(done []*wireRun, pair serverPair, prefix string) []*wireRun {
	var mixable []suiteCase
	for _, r := range done {
		c := r.c
		if r.diff != "" || r.std.Closed || strings.HasSuffix(r.name, "(pipelined)") ||
			c.deviation != nil || c.ignore != nil || c.ignoreBody || c.ignoreVersion ||
			strings.Contains(c.raw, pause) || strings.Contains(c.raw, await) || len(requestMethods(c.raw)) != 1 || len(r.std.Resps) == 0 {
			continue
		}
		mixable = append(mixable, c)
	}
	const per = 6
	var runs []*wireRun
	for i := 0; i < len(mixable); i += per {
		group := mixable[i:min(i+per, len(mixable))]
		var names []string
		var raw strings.Builder
		for _, c := range group {
			names = append(names, c.name)
			raw.WriteString(c.raw)
		}
		c := suiteCase{parityCase: parityCase{name: "mix of " + strings.Join(names, ", "), raw: raw.String()}}
		runs = append(runs, &wireRun{name: prefix + c.name, c: c, pair: pair})
	}
	return runs
}

// clientResp is what net/http's client makes of a response.
type clientResp struct {
	Err              bool
	Status           int
	Header           http.Header // without Date
	Body             string
	BodyErr          bool
	Trailer          http.Header
	ContentLength    int64
	TransferEncoding []string
	Close            bool
	Informational    []string // 1xx codes and their header, 100 Continue too
}

// clientRequests parses the requests of raw for net/http's client; nil if
// a request in it does not parse.
func clientRequests(raw string) []*http.Request {
	parts, _ := splitRaw(raw)
	br := bufio.NewReader(strings.NewReader(strings.Join(parts, "")))
	var reqs []*http.Request
	for {
		req, err := http.ReadRequest(br)
		if err == io.EOF {
			return reqs
		}
		if err != nil {
			return nil
		}
		body, err := io.ReadAll(req.Body)
		if err != nil {
			return nil
		}
		req.Body = io.NopCloser(bytes.NewReader(body))
		req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
		if len(body) == 0 && req.ContentLength <= 0 {
			req.Body, req.GetBody, req.ContentLength = nil, nil, 0
		}
		req.RequestURI = ""
		// The client speaks HTTP/1.1 whatever the request said; its
		// Proto decides whether it waits for 100 Continue.
		req.Proto, req.ProtoMajor, req.ProtoMinor = "HTTP/1.1", 1, 1
		if req.Host == "" {
			req.Host = "x" // else the address, which differs between the servers
		}
		reqs = append(reqs, req)
	}
}

// clientDo sends the requests of c.raw to addr through a Transport of its
// own, on one connection where the server keeps it.
func clientDo(c suiteCase, addr string, pair serverPair) []clientResp {
	tlsConf := pair.client
	if tlsConf != nil {
		tlsConf = tlsConf.Clone() // an HTTP/2 Transport adds to NextProtos
	}
	tr := &http.Transport{TLSClientConfig: tlsConf, ExpectContinueTimeout: 2 * time.Second, MaxConnsPerHost: 1}
	if pair.h2 && tlsConf != nil {
		tr.ForceAttemptHTTP2 = true
	} else if pair.h2 {
		tr.Protocols = new(http.Protocols)
		tr.Protocols.SetUnencryptedHTTP2(true)
	}
	defer tr.CloseIdleConnections()
	client := &http.Client{
		Transport:     tr,
		Timeout:       timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	scheme := "http"
	if tlsConf != nil {
		scheme = "https"
	}
	var out []clientResp
	for _, req := range clientRequests(c.raw) {
		var x clientResp
		var mu sync.Mutex
		trace := &httptrace.ClientTrace{
			Got100Continue: func() {
				mu.Lock()
				x.Informational = append(x.Informational, "100")
				mu.Unlock()
			},
			Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
				mu.Lock()
				x.Informational = append(x.Informational, fmt.Sprint(code, " ", http.Header(h)))
				mu.Unlock()
				return nil
			},
		}
		req = req.WithContext(httptrace.WithClientTrace(context.Background(), trace))
		req.URL.Scheme, req.URL.Host = scheme, addr
		resp, err := client.Do(req)
		if err != nil {
			x.Err = true
			out = append(out, x)
			continue
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		mu.Lock()
		x.Status, x.Header, x.Body, x.BodyErr = resp.StatusCode, resp.Header.Clone(), string(body), err != nil
		x.Header.Del("Date")
		if len(resp.Trailer) > 0 {
			x.Trailer = resp.Trailer
		}
		x.ContentLength, x.TransferEncoding, x.Close = resp.ContentLength, resp.TransferEncoding, resp.Close
		mu.Unlock()
		out = append(out, x)
	}
	return out
}

// compareClient compares what net/http's client made of both servers'
// responses, with c's ignored fields.
func compareClient(c suiteCase, std, ours []clientResp) string {
	norm := func(rs []clientResp) []clientResp {
		var out []clientResp
		for _, x := range rs {
			x.Header = x.Header.Clone()
			for _, k := range c.ignore {
				x.Header.Del(k)
				if k == "Content-Length" {
					x.ContentLength = 0
				}
			}
			if c.ignoreBody {
				x.Body = ""
			}
			out = append(out, x)
		}
		return out
	}
	if a, b := norm(std), norm(ours); !reflect.DeepEqual(a, b) {
		return fmt.Sprintf("client: responses differ\nnet/http:\n%s\nhttpd:\n%s", fmtClient(std), fmtClient(ours))
	}
	return ""
}

func fmtClient(rs []clientResp) string {
	var b strings.Builder
	for i, x := range rs {
		body := x.Body
		x.Body = ""
		fmt.Fprintf(&b, "  [%d] %+v\n      body %s\n", i, x, shorten(body))
	}
	return b.String()
}

// clientRun is one case sent through net/http's client to both servers.
type clientRun struct {
	name      string
	c         suiteCase
	pair      serverPair
	std, ours []clientResp
	diff      string
}

func runClient(runs []*clientRun) {
	sem := make(chan struct{}, suiteParallel)
	var wg sync.WaitGroup
	for _, r := range runs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			for range 2 { // once more if they differ: see suiteSettleSlow
				var w2 sync.WaitGroup
				w2.Add(2)
				go func() { defer w2.Done(); r.std = clientDo(r.c, r.pair.std, r.pair) }()
				go func() { defer w2.Done(); r.ours = clientDo(r.c, r.pair.ours, r.pair) }()
				w2.Wait()
				if r.diff = compareClient(r.c, r.std, r.ours); r.diff == "" {
					break
				}
			}
		}()
	}
	wg.Wait()
}

// selectCases returns the cases -parity.case selects.
func selectCases(t testing.TB, cases []suiteCase) []suiteCase {
	re, err := regexp.Compile(*suiteOnly)
	if err != nil {
		t.Fatal(err)
	}
	return slices.DeleteFunc(slices.Clone(cases), func(c suiteCase) bool {
		return !re.MatchString(c.name)
	})
}

// TestParitySuite runs the suite: every case plain and over TLS, once
// and pipelined, mixed runs, and through net/http's client.
func TestParitySuite(t *testing.T) {
	t.Parallel()
	all := suiteCases()
	names := map[string]bool{}
	for _, c := range all {
		if names[c.name] {
			t.Fatalf("two cases named %q", c.name)
		}
		names[c.name] = true
	}
	cases := selectCases(t, all)
	plain, tlsPair := suiteServers(t, suiteHandler(t), nil)

	runs := append(wireRuns(cases, plain, "plain/"), wireRuns(cases, tlsPair, "tls/")...)
	var clients []*clientRun
	for _, c := range cases {
		if c.noClient || clientRequests(c.raw) == nil {
			continue
		}
		clients = append(clients, &clientRun{name: "client/" + c.name, c: c, pair: plain},
			&clientRun{name: "client+tls/" + c.name, c: c, pair: tlsPair})
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); runWire(runs) }()
	go func() { defer wg.Done(); runClient(clients) }()
	wg.Wait()
	var plainRuns, tlsRuns []*wireRun
	for _, r := range runs {
		if r.pair == plain {
			plainRuns = append(plainRuns, r)
		} else {
			tlsRuns = append(tlsRuns, r)
		}
	}
	mixed := append(mixedRuns(plainRuns, plain, "plain/"), mixedRuns(tlsRuns, tlsPair, "tls/")...)
	runWire(mixed)
	runs = append(runs, mixed...)

	for _, r := range runs {
		if r.diff != "" {
			t.Errorf("%s: %s", r.name, r.diff)
		}
	}
	for _, r := range clients {
		if r.diff != "" {
			t.Errorf("%s: %s", r.name, r.diff)
		}
	}
	t.Logf("%d cases: %d exchanges with each server (%d pipelined, %d over TLS, %d mixed runs), %d through net/http's client",
		len(cases), len(runs), countRuns(runs, "(pipelined)"), countRuns(runs, "tls/"), len(mixed), len(clients))
}

func countRuns(runs []*wireRun, sub string) int {
	n := 0
	for _, r := range runs {
		if strings.Contains(r.name, sub) {
			n++
		}
	}
	return n
}

// TestParityWriteTimeout: WriteTimeout as net/http's: a response not
// written within it of its request's head is not sent, and the
// connection closes.
func TestParityWriteTimeout(t *testing.T) {
	t.Parallel()
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if segment(r, 0) == "stream" {
			io.WriteString(w, "first ")
			w.(http.Flusher).Flush()
		}
		if segment(r, 1) == "slow" {
			time.Sleep(time.Second)
		}
		io.WriteString(w, "done")
	})
	plain, _ := suiteServers(t, h, func(std *http.Server, ours *httpd.Server) {
		std.WriteTimeout, ours.WriteTimeout = 500*time.Millisecond, 500*time.Millisecond
	})
	cs := func(name, raw string) suiteCase { return suiteCase{parityCase: parityCase{name: name, raw: raw}} }
	runs := wireRuns([]suiteCase{
		cs("in time", get("/x/fast")),
		cs("late", get("/x/slow")),
		cs("late after a flush", get("/stream/slow")),
		cs("in time, then late", get("/x/fast")+get("/x/slow")),
	}, plain, "")
	runWire(runs)
	for _, r := range runs {
		if r.diff != "" {
			t.Errorf("%s: %s", r.name, r.diff)
		}
	}
}

// TestParityPlainToTLS: plaintext HTTP sent to a TLS port gets
// net/http's 400, and the connection closed.
func TestParityPlainToTLS(t *testing.T) {
	t.Parallel()
	_, tlsPair := suiteServers(t, http.HandlerFunc(hello), nil)
	plain := serverPair{std: tlsPair.std, ours: tlsPair.ours} // dialled without TLS
	cs := func(name, raw string) suiteCase { return suiteCase{parityCase: parityCase{name: name, raw: raw}} }
	runs := []*wireRun{
		{name: "GET", c: cs("GET", get("/")), pair: plain},
		{name: "POST", c: cs("POST", post("/", "body")), pair: plain},
	}
	runWire(runs)
	for _, r := range runs {
		if r.diff != "" {
			t.Errorf("%s: %s", r.name, r.diff)
		}
	}
}
