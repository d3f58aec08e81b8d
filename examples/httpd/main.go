// Command httpd is a small web site served by gracepoll's package httpd:
// an ordinary net/http program (http.ServeMux with Go 1.22 patterns, a
// middleware, http.FileServerFS over an embedded directory,
// encoding/json, http.Flusher, io.Copy both ways) whose only change is
// the server type, httpd.Server in place of http.Server.
//
//	go run ./examples/httpd                     # http://127.0.0.1:8080/
//	go run ./examples/httpd -h2c                # and HTTP/2 with prior knowledge
//	go run ./examples/httpd -tls-self-signed    # https://localhost:8080/, h2 or http/1.1
//
// Routes:
//
//	GET  /                 an HTML page with a stylesheet, a script and an image,
//	                       which shows the protocol of its own request and of
//	                       the script's fetch of /api/time
//	GET  /static/...       the embedded static directory (http.FileServerFS)
//	GET  /api/time         the server's time, and the request's protocol, as JSON
//	POST /api/echo         the body's length and SHA-256 as JSON (and the body
//	                       itself when it is short), hashed as it streams in
//	GET  /stream?n=N       N server-sent events, one every 100 ms, each flushed
//	GET  /download?size=N  N bytes of a known pattern, streamed by io.Copy
//	PUT  /upload           (or POST) counts the body's bytes with io.Copy to
//	                       io.Discard and answers the count
//	GET  /plaintext        "Hello, World!" (the benchmark routes)
//	GET  /json             {"message":"Hello, World!"}
//
// -v turns on a request logger, a middleware wrapping the mux, to show
// that a wrapped ResponseWriter keeps working (flushing included).
//
// With -tls-self-signed it serves HTTPS with a certificate for localhost,
// 127.0.0.1 and ::1 signed at start-up by a CA made in the process. The
// CA's certificate (PEM) goes to -tls-cacert-out (by default a file in
// the temporary directory, printed at start) for clients to trust:
//
//	go run ./examples/httpd -tls-self-signed -tls-cacert-out /tmp/httpd-ca.pem
//	curl --cacert /tmp/httpd-ca.pem https://localhost:8080/api/time
//
// and the line printed at start gives the certificate's SPKI hash for
// chromium --ignore-certificate-errors-spki-list.
//
// HTTP/1.1 is always served. Over TLS, HTTP/2 is too, chosen by ALPN
// (httpd.Server's default, as http.Server's); -h2c serves HTTP/2 on the
// plain port as well, to clients that start with its preface (prior
// knowledge; the "Upgrade: h2c" of HTTP/1.1 is not supported):
//
//	curl --http2-prior-knowledge http://127.0.0.1:8080/api/time   # with -h2c
//	curl --http2 --cacert /tmp/httpd-ca.pem https://localhost:8080/api/time
//
// SIGINT or SIGTERM shuts it down gracefully: it stops accepting, lets
// the requests in progress finish for up to -shutdown-timeout (10 s),
// then resets what is left, and says which happened.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/gracepoll/gracepoll/httpd"
	"github.com/gracepoll/gracepoll/internal/selfsigned"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr, nil)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "httpd:", err)
		os.Exit(2)
	}
}

// run serves until ctx is done, then shuts down. ready, if not nil,
// receives the bound address once the server listens (tests use it, with
// -addr 127.0.0.1:0).
func run(ctx context.Context, args []string, stdout, stderr io.Writer, ready chan<- net.Addr) error {
	fs := flag.NewFlagSet("httpd", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "127.0.0.1:8080", "TCP address to listen on")
	selfSigned := fs.Bool("tls-self-signed", false, "serve HTTPS with a certificate for localhost, 127.0.0.1 and ::1 signed by a CA made at start-up")
	caOut := fs.String("tls-cacert-out", "", "with -tls-self-signed, write the CA's certificate (PEM) here (default: a new file in the temporary directory, printed at start)")
	// The graceful part of a shutdown is bounded: a download of many
	// gigabytes must not keep the process alive long after SIGTERM.
	grace := fs.Duration("shutdown-timeout", 10*time.Second, "on SIGINT or SIGTERM, how long the requests in progress may take to finish before their connections are reset")
	h2c := fs.Bool("h2c", false, "also serve HTTP/2 with prior knowledge (h2c) on the plain port; over TLS, HTTP/2 is negotiated by ALPN without it")
	verbose := fs.Bool("v", false, "log every request (method, path, status, bytes, duration) to stderr")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "httpd: a small web site on gracepoll's package httpd.\n\nUsage: go run ./examples/httpd [flags]\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if *grace <= 0 {
		fs.Usage()
		return errors.New("-shutdown-timeout must be positive")
	}
	if *caOut != "" && !*selfSigned {
		fs.Usage()
		return errors.New("-tls-cacert-out needs -tls-self-signed")
	}
	if *h2c && *selfSigned {
		fs.Usage()
		return errors.New("-h2c is for plain TCP: with -tls-self-signed, HTTP/2 is negotiated by ALPN")
	}

	logger := log.New(stderr, "httpd: ", log.LstdFlags)
	var h http.Handler = newMux()
	if *verbose {
		h = logRequests(logger, h)
	}
	srv := &httpd.Server{Addr: *addr, Handler: h, ErrorLog: logger}
	protos := "HTTP/1.1"
	if *h2c {
		srv.Protocols = h2cProtocols()
		protos = "HTTP/1.1 and HTTP/2 with prior knowledge (h2c)"
	}
	var ca *selfsigned.CA
	if *selfSigned {
		// A CA and a leaf it signed rather than one self-signed leaf:
		// Chromium (through NSS) takes only a CA as a trust anchor.
		var err error
		if ca, err = selfsigned.NewCA("gracepoll examples/httpd CA"); err != nil {
			return err
		}
		srv.TLSConfig = ca.ServerConfig()
	}

	l, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	scheme, host := "http", l.Addr().String()
	if ca != nil {
		scheme, protos = "https", "HTTP/2 (h2) and HTTP/1.1, by ALPN"
		_, port, _ := net.SplitHostPort(host)
		host = net.JoinHostPort("localhost", port)
		// The file is left behind on exit: a client may still use it.
		path, err := ca.WriteCertPEM(*caOut, "httpd-ca-*.pem")
		if err != nil {
			l.Close()
			return err
		}
		fmt.Fprintf(stdout, "httpd: CA certificate written to %s: curl --cacert %s %s://%s/\n", path, path, scheme, host)
		fmt.Fprintf(stdout, "httpd: or: chromium --ignore-certificate-errors-spki-list=%s %s://%s/\n", ca.LeafSPKIHash(), scheme, host)
	}
	fmt.Fprintf(stdout, "httpd: serving %s://%s/ over %s (SIGINT or SIGTERM stops it)\n", scheme, host, protos)
	if ready != nil {
		ready <- l.Addr()
	}

	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	select {
	case err := <-served:
		// Serve failed before any shutdown was asked for.
		return err
	case <-ctx.Done():
	}

	var open int64
	if tr := srv.Transport(); tr != nil {
		open = tr.Stats().Open
	}
	fmt.Fprintf(stdout, "httpd: shutting down: %s open; waiting up to %v for requests in progress\n", plural(open, "connection"), *grace)
	start := time.Now()
	sctx, cancel := context.WithTimeout(context.Background(), *grace)
	defer cancel()
	// When sctx ends, Shutdown cancels every request's context and
	// resets what is left: a handler that watches r.Context() (the
	// /download and /stream ones do) or writes stops then, rather than
	// when its client has taken gigabytes.
	serr := srv.Shutdown(sctx)
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	switch {
	case serr == nil:
		fmt.Fprintf(stdout, "httpd: shut down cleanly in %v: every request in progress finished\n", time.Since(start).Round(time.Millisecond))
	case errors.Is(serr, context.DeadlineExceeded):
		fmt.Fprintf(stdout, "httpd: shutdown timed out after %v: the requests still in progress were cancelled, their connections reset\n", *grace)
	default:
		return fmt.Errorf("shutdown: %w", serr)
	}
	return nil
}

// h2cProtocols is -h2c's Server.Protocols: HTTP/1.1, and HTTP/2 with
// prior knowledge on plain TCP. Without TLS there is no ALPN: the server
// tells the two apart by HTTP/2's connection preface.
func h2cProtocols() *http.Protocols {
	p := new(http.Protocols)
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	return p
}

// plural is "1 connection" or "n connections".
func plural(n int64, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
