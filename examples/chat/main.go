// Command chat is a chat room served by gracepoll's package httpd and
// package ws: a page at / that a browser opens, and a WebSocket at /ws
// on which every text message a client sends is sent to every client
// connected, the sender included.
//
//	go run ./examples/chat                     # http://127.0.0.1:8081/
//	go run ./examples/chat -tls-self-signed    # https://localhost:8081/
//
// A client names itself in the URL (/ws?name=alice); the server makes
// the name unique by adding a number ("alice#3"), so that no one can
// pass for another. Everything the server sends is a JSON text message:
//
//	{"kind":"hello","from":"alice#3"}             to the new client alone
//	{"kind":"join","from":"alice#3"}              to everyone, alice included
//	{"kind":"msg","from":"alice#3","text":"hi"}   to everyone, alice included
//	{"kind":"leave","from":"alice#3"}
//
// The room is event-driven, as package ws is: an idle client holds no
// goroutine, and a message is broadcast from the sender's waiter with
// one ws.PreparedMessage, encoded (and compressed, for the clients that
// agreed permessage-deflate) once for all. What a client may cost the
// others is bounded:
//
//   - a message is at most -max-message bytes (1009 beyond it);
//   - a client that does not read is dropped (reset) once it has left
//     more than -max-unread bytes unread, without slowing anyone: writes
//     never block;
//   - a client that sends more than -rate bytes a second (after a burst
//     of -burst) is closed with 1008, since whatever it sends is sent
//     again to every client;
//   - a client that sends nothing, not even a pong, for two ping
//     intervals (30 s) is dropped.
//
// With -tls-self-signed it serves HTTPS and WSS with a certificate for
// localhost, 127.0.0.1 and ::1 signed at start-up by a CA made in the
// process (internal/selfsigned). The CA's certificate (PEM) goes to
// -tls-cacert-out, by default a new file in the temporary directory,
// printed at start for clients to trust.
//
// SIGINT or SIGTERM shuts it down gracefully: httpd.Server.Shutdown
// sends every client a close frame with 1001 (going away) and waits up
// to -shutdown-timeout for them to flush, then resets what is left.
package main

import (
	"context"
	_ "embed"
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

	"github.com/gracepoll/gracepoll/conn"
	"github.com/gracepoll/gracepoll/httpd"
	"github.com/gracepoll/gracepoll/internal/selfsigned"
	"github.com/gracepoll/gracepoll/ws"
)

// page is the chat's one page, its script and style inline.
//
//go:embed static/index.html
var page []byte

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr, nil)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "chat:", err)
		os.Exit(2)
	}
}

// pingInterval is how long a client may stay silent before it is
// pinged; one more interval without an answer drops it. It also keeps a
// quiet room's connections open through proxies that close idle ones.
const pingInterval = 30 * time.Second

// run serves until ctx is done, then shuts down. ready, if not nil,
// receives the bound address once the server listens (tests use it,
// with -addr 127.0.0.1:0).
func run(ctx context.Context, args []string, stdout, stderr io.Writer, ready chan<- net.Addr) error {
	fs := flag.NewFlagSet("chat", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "127.0.0.1:8081", "TCP address to listen on")
	selfSigned := fs.Bool("tls-self-signed", false, "serve HTTPS and WSS with a certificate for localhost, 127.0.0.1 and ::1 signed by a CA made at start-up")
	caOut := fs.String("tls-cacert-out", "", "with -tls-self-signed, write the CA's certificate (PEM) here (default: a new file in the temporary directory, printed at start)")
	maxMessage := fs.Int64("max-message", 64<<10, "the largest message a client may send, in bytes (closed with 1009 beyond it)")
	maxUnread := fs.Int("max-unread", 1<<20, "how many bytes a client may leave unread before it is dropped")
	rate := fs.Float64("rate", 16<<10, "the bytes a second a client may send, on average; each message counts at least 256")
	burst := fs.Float64("burst", 128<<10, "the bytes a client may send at once beyond -rate")
	grace := fs.Duration("shutdown-timeout", 5*time.Second, "on SIGINT or SIGTERM, how long clients have to take their close frame before they are reset")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "chat: a chat room on gracepoll's packages httpd and ws.\n\nUsage: go run ./examples/chat [flags]\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	switch {
	case fs.NArg() > 0:
		fs.Usage()
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	case *maxMessage <= 0 || *maxUnread <= 0 || *rate <= 0 || *grace <= 0:
		fs.Usage()
		return errors.New("-max-message, -max-unread, -rate and -shutdown-timeout must be positive")
	case *burst < float64(*maxMessage):
		fs.Usage()
		return errors.New("-burst must be at least -max-message, or the largest message could never be sent")
	case *caOut != "" && !*selfSigned:
		fs.Usage()
		return errors.New("-tls-cacert-out needs -tls-self-signed")
	}

	logger := log.New(stderr, "chat: ", log.LstdFlags)
	rm := newRoom(limits{maxMessage: *maxMessage, rate: *rate, burst: *burst, maxUnread: *maxUnread}, logger)
	srv := &httpd.Server{
		Addr:     *addr,
		Handler:  newMux(rm),
		ErrorLog: logger,
		// MaxQueued is where conn refuses a write to a connection that
		// does not read, and ws resets it (ErrSlowReader).
		Options: conn.Options{MaxQueued: *maxUnread},
	}
	var ca *selfsigned.CA
	if *selfSigned {
		var err error
		if ca, err = selfsigned.NewCA("gracepoll examples/chat CA"); err != nil {
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
		scheme = "https"
		_, port, _ := net.SplitHostPort(host)
		host = net.JoinHostPort("localhost", port)
		path, err := ca.WriteCertPEM(*caOut, "chat-ca-*.pem")
		if err != nil {
			l.Close()
			return err
		}
		fmt.Fprintf(stdout, "chat: CA certificate written to %s: trust it in the browser, or: chromium --ignore-certificate-errors-spki-list=%s %s://%s/\n", path, ca.LeafSPKIHash(), scheme, host)
	}
	fmt.Fprintf(stdout, "chat: serving %s://%s/ (SIGINT or SIGTERM stops it)\n", scheme, host)
	if ready != nil {
		ready <- l.Addr()
	}

	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	select {
	case err := <-served:
		return err // Serve failed before any shutdown was asked for
	case <-ctx.Done():
	}

	rm.closing.Store(true)
	fmt.Fprintf(stdout, "chat: shutting down: %s connected; sending 1001 (going away) to each\n", plural(rm.clients.Size(), "client"))
	start := time.Now()
	sctx, cancel := context.WithTimeout(context.Background(), *grace)
	defer cancel()
	serr := srv.Shutdown(sctx)
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	fmt.Fprintf(stdout, "chat: since start-up: %s dropped for not reading, %s closed for sending too fast\n",
		plural(int(rm.slow.Load()), "client"), plural(int(rm.limited.Load()), "client"))
	switch {
	case serr == nil:
		fmt.Fprintf(stdout, "chat: shut down cleanly in %v\n", time.Since(start).Round(time.Millisecond))
	case errors.Is(serr, context.DeadlineExceeded):
		fmt.Fprintf(stdout, "chat: shutdown timed out after %v: the clients that had not taken their close frame were reset\n", *grace)
	default:
		return fmt.Errorf("shutdown: %w", serr)
	}
	return nil
}

// newMux serves the page at / and the room at /ws.
func newMux(rm *room) *http.ServeMux {
	up := &ws.Upgrader{
		// Browsers offer permessage-deflate; chat text compresses well,
		// and without context takeover (the default) a connection keeps
		// no compression state between messages.
		Compression:    true,
		MaxMessageSize: rm.maxMessage,
		PingInterval:   pingInterval,
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Write(page)
	})
	mux.HandleFunc("GET /ws", func(w http.ResponseWriter, r *http.Request) {
		// Upgrade answers a bad handshake or a foreign Origin itself.
		up.Upgrade(w, r, chatHandler{rm: rm, nick: r.URL.Query().Get("name")})
	})
	return mux
}

// plural renders "1 client" and "2 clients".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
