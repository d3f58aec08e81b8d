//go:build linux

package peers

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cloudwego/hertz/pkg/app"
	hertzserver "github.com/cloudwego/hertz/pkg/app/server"
	"github.com/cloudwego/hertz/pkg/common/hlog"
	"github.com/lesismal/nbio/logging"
	"github.com/lesismal/nbio/nbhttp"
	"github.com/valyala/fasthttp"
)

// The HTTP comparison's routes and the bytes every server answers them
// with. Each server serves the same routes with the same status, content
// type and body; the head around them (Date, Server, header order) is each
// server's own.
const (
	// PlaintextBody is GET /plaintext's body, text/plain.
	PlaintextBody = "Hello, World!"
	// JSONBody is what encoding/json makes of GET /json's message, the
	// body every server answers it with, application/json.
	JSONBody = `{"message":"Hello, World!"}`
	// SleepBody is GET /sleep?ms=N's body, after the handler slept N ms.
	SleepBody = "ok"
	// maxSleep bounds /sleep's N: a typo in a benchmark must not park
	// a handler for minutes.
	maxSleep = 10 * time.Second
)

// httpMessage is the JSON route's value, encoded per request as a real
// handler encodes its answer.
type httpMessage struct {
	Message string `json:"message"`
}

// Header values of HTTPHandler's responses. The slices are shared by
// every response: http.Header's contract lets a handler hand the server a
// value, and no server here writes into one (it saves the allocations a
// handler written for speed would save too). The Content-Length is set
// by the handler because nbhttp frames a body without one as chunked,
// where net/http computes it: every server sends the same framing.
var (
	plainType   = []string{"text/plain"}
	jsonType    = []string{"application/json"}
	plainLength = []string{strconv.Itoa(len(PlaintextBody))}
	sleepLength = []string{strconv.Itoa(len(SleepBody))}
)

// sleepMillis parses /sleep's raw query "ms=N", the only form the
// benchmarks send, and says whether it was one.
func sleepMillis(rawQuery string) (time.Duration, bool) {
	v, ok := strings.CutPrefix(rawQuery, "ms=")
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 || time.Duration(n)*time.Millisecond > maxSleep {
		return 0, false
	}
	return time.Duration(n) * time.Millisecond, true
}

// HTTPHandler serves the comparison's routes through net/http's
// interface: the handler net/http, nbio's nbhttp and gracepoll's httpd
// serve, one value for all three, so that they differ only in what runs
// it.
//
//	GET /plaintext    200 "Hello, World!" text/plain
//	GET /json         200 {"message":"Hello, World!"} application/json (encoding/json, per request)
//	GET /sleep?ms=N   200 "ok" text/plain, after sleeping N ms
//
// Any other path is 404, another method 405, a bad /sleep query 400.
type HTTPHandler struct{}

// ServeHTTP answers one request (see HTTPHandler).
func (HTTPHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	switch r.URL.Path {
	case "/plaintext":
		h := w.Header()
		h["Content-Type"], h["Content-Length"] = plainType, plainLength
		w.Write([]byte(PlaintextBody))
	case "/json":
		body, err := json.Marshal(httpMessage{Message: PlaintextBody})
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		h := w.Header()
		h["Content-Type"], h["Content-Length"] = jsonType, []string{strconv.Itoa(len(body))}
		w.Write(body)
	case "/sleep":
		d, ok := sleepMillis(r.URL.RawQuery)
		if !ok {
			http.Error(w, "want ms=N", http.StatusBadRequest)
			return
		}
		time.Sleep(d)
		h := w.Header()
		h["Content-Type"], h["Content-Length"] = plainType, sleepLength
		w.Write([]byte(SleepBody))
	default:
		http.NotFound(w, r)
	}
}

// listenLoopback listens on 127.0.0.1 on a free port.
func listenLoopback() (*net.TCPListener, error) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	return ln.(*net.TCPListener), nil
}

// NetHTTP is Go's net/http server, with its defaults, serving HTTPHandler.
type NetHTTP struct {
	srv  *http.Server
	addr string
}

// NewNetHTTP starts net/http on 127.0.0.1, on a free port.
func NewNetHTTP() (Server, error) {
	ln, err := listenLoopback()
	if err != nil {
		return nil, err
	}
	s := &NetHTTP{srv: &http.Server{Handler: HTTPHandler{}}, addr: ln.Addr().String()}
	go s.srv.Serve(ln)
	return s, nil
}

// Addr returns the listening address.
func (s *NetHTTP) Addr() string { return s.addr }

// Close closes the listener and every connection.
func (s *NetHTTP) Close() error { return s.srv.Close() }

// FastHTTP is valyala/fasthttp's server with its defaults and its own
// handler interface (fastHTTPHandler).
type FastHTTP struct {
	srv  *fasthttp.Server
	ln   net.Listener
	done chan error
}

// NewFastHTTP starts fasthttp on 127.0.0.1, on a free port.
func NewFastHTTP() (Server, error) {
	ln, err := listenLoopback()
	if err != nil {
		return nil, err
	}
	s := &FastHTTP{srv: &fasthttp.Server{Handler: fastHTTPHandler}, ln: ln, done: make(chan error, 1)}
	go func() { s.done <- s.srv.Serve(ln) }()
	return s, nil
}

// fastHTTPHandler is HTTPHandler's routes in fasthttp's interface.
func fastHTTPHandler(ctx *fasthttp.RequestCtx) {
	if !ctx.IsGet() {
		ctx.Error("method not allowed", fasthttp.StatusMethodNotAllowed)
		return
	}
	switch string(ctx.Path()) { // the conversion does not allocate in a switch
	case "/plaintext":
		ctx.SetContentType("text/plain")
		ctx.WriteString(PlaintextBody)
	case "/json":
		body, err := json.Marshal(httpMessage{Message: PlaintextBody})
		if err != nil {
			ctx.Error(err.Error(), fasthttp.StatusInternalServerError)
			return
		}
		ctx.SetContentType("application/json")
		ctx.Write(body)
	case "/sleep":
		d, ok := sleepMillis(string(ctx.URI().QueryString()))
		if !ok {
			ctx.Error("want ms=N", fasthttp.StatusBadRequest)
			return
		}
		time.Sleep(d)
		ctx.SetContentType("text/plain")
		ctx.WriteString(SleepBody)
	default:
		ctx.Error("404 page not found", fasthttp.StatusNotFound)
	}
}

// Addr returns the listening address.
func (s *FastHTTP) Addr() string { return s.ln.Addr().String() }

// Close stops the server: Shutdown closes the listener and the idle
// connections and waits for the others to finish their request, bounded
// here so that a stuck client cannot hold the launcher.
func (s *FastHTTP) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return s.srv.ShutdownWithContext(ctx)
}

// NbioHTTP is lesismal/nbio's nbhttp engine with its defaults (IOMod
// non-blocking: the poller goroutines read, handlers run on its executor)
// serving HTTPHandler.
type NbioHTTP struct{ nbhttpServer }

// NewNbioHTTP starts nbhttp on 127.0.0.1, on a free port.
func NewNbioHTTP() (Server, error) {
	s, err := startNbhttp(nbhttp.Config{Handler: HTTPHandler{}})
	if err != nil {
		return nil, err
	}
	return &NbioHTTP{s}, nil
}

// nbhttpServer is an nbhttp engine listening on 127.0.0.1.
type nbhttpServer struct {
	eng  *nbhttp.Engine
	addr string
}

// startNbhttp starts an engine with conf on 127.0.0.1, on a port the
// kernel chooses (read off the listener).
func startNbhttp(conf nbhttp.Config) (nbhttpServer, error) {
	// nbio logs its start and stop at Info: keep the launcher's stdout
	// to what the benchmarks read.
	logging.SetLevel(logging.LevelError)
	var (
		mu   sync.Mutex
		addr string
	)
	conf.Network, conf.Addrs = "tcp", []string{"127.0.0.1:0"}
	conf.Listen = func(network, a string) (net.Listener, error) {
		ln, err := net.Listen(network, a)
		if err == nil {
			mu.Lock()
			addr = ln.Addr().String()
			mu.Unlock()
		}
		return ln, err
	}
	eng := nbhttp.NewEngine(conf)
	if err := eng.Start(); err != nil {
		return nbhttpServer{}, err
	}
	mu.Lock()
	defer mu.Unlock()
	if addr == "" {
		eng.Stop()
		return nbhttpServer{}, errors.New("nbhttp: started without a listener")
	}
	return nbhttpServer{eng: eng, addr: addr}, nil
}

// Addr returns the listening address.
func (s *nbhttpServer) Addr() string { return s.addr }

// Close stops the engine and closes every connection.
func (s *nbhttpServer) Close() error {
	s.eng.Stop()
	return nil
}

// HertzHTTP is cloudwego/hertz with its defaults (cloudwego/netpoll as the
// transport on Linux) and its own handler interface, the three routes on
// its router.
type HertzHTTP struct {
	h    *hertzserver.Hertz
	addr string
}

// NewHertzHTTP starts hertz on 127.0.0.1, on a free port.
func NewHertzHTTP() (Server, error) {
	// hertz logs its start, its routes and every connection error.
	hlog.SetLevel(hlog.LevelError)
	ln, err := listenLoopback()
	if err != nil {
		return nil, err
	}
	h := hertzserver.New(hertzserver.WithListener(ln), hertzserver.WithDisablePrintRoute(true))
	h.GET("/plaintext", func(_ context.Context, c *app.RequestContext) {
		c.Data(http.StatusOK, "text/plain", []byte(PlaintextBody))
	})
	h.GET("/json", func(_ context.Context, c *app.RequestContext) {
		body, err := json.Marshal(httpMessage{Message: PlaintextBody})
		if err != nil {
			c.Data(http.StatusInternalServerError, "text/plain", []byte(err.Error()))
			return
		}
		c.Data(http.StatusOK, "application/json", body)
	})
	h.GET("/sleep", func(_ context.Context, c *app.RequestContext) {
		d, ok := sleepMillis(string(c.URI().QueryString()))
		if !ok {
			c.Data(http.StatusBadRequest, "text/plain", []byte("want ms=N"))
			return
		}
		time.Sleep(d)
		c.Data(http.StatusOK, "text/plain", []byte(SleepBody))
	})
	go h.Run()
	return &HertzHTTP{h: h, addr: ln.Addr().String()}, nil
}

// Addr returns the listening address.
func (s *HertzHTTP) Addr() string { return s.addr }

// Close closes the listener and every connection.
func (s *HertzHTTP) Close() error { return s.h.Close() }
