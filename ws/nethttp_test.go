package ws_test

import (
	"context"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/gracepoll/gracepoll/httpd"
	"github.com/gracepoll/gracepoll/internal/testkit"
	"github.com/gracepoll/gracepoll/ws"
)

// netHTTPMessage is the body of Upgrade's answer on net/http.
const netHTTPMessage = "ws: Upgrade needs an httpd.Server; this is net/http's\n"

// startNetHTTP serves, on net/http's server, Upgrade called by a handler
// at /call (its error sent on errs) and an Upgrader mounted at /mounted;
// the server's ErrorLog writes to logged.
func startNetHTTP(t *testing.T) (url string, errs <-chan error, logged *testkit.SyncBuffer) {
	t.Helper()
	u := &ws.Upgrader{Handler: ws.BaseHandler{}}
	ch := make(chan error, 1)
	mux := http.NewServeMux()
	mux.HandleFunc("/call", func(w http.ResponseWriter, r *http.Request) {
		c, err := u.Upgrade(w, r, u.Handler)
		if c != nil {
			t.Error("Upgrade on net/http returned a connection")
		}
		ch <- err
	})
	mux.Handle("/mounted", u)
	srv := httptest.NewUnstartedServer(mux)
	logged = new(testkit.SyncBuffer)
	srv.Config.ErrorLog = log.New(logged, "", 0)
	srv.Start()
	t.Cleanup(srv.Close)
	return "ws" + strings.TrimPrefix(srv.URL, "http"), ch, logged
}

// TestUpgradeOnNetHTTP: on net/http's server, whose connections cannot be
// handed over, a valid handshake is answered 500 with a body saying why,
// none of the handshake's fields, and an error matching ErrNotHttpd (and
// httpd.ErrNotUpgrade, what httpd.Switch returns); a mounted Upgrader,
// with nobody to return the error to, logs it to the server's ErrorLog.
func TestUpgradeOnNetHTTP(t *testing.T) {
	url, errs, logged := startNetHTTP(t)
	dial := func(t *testing.T, path string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), hostileTimeout)
		defer cancel()
		d := ws.Dialer{Subprotocols: []string{"chat"}, Compression: true}
		c, resp, err := d.Dial(ctx, url+path)
		if c != nil {
			c.CloseNow()
			t.Fatal("Dial succeeded")
		}
		if !errors.Is(err, ws.ErrBadHandshake) || resp == nil || resp.StatusCode != http.StatusInternalServerError {
			t.Fatalf("Dial: %v, response %v; want ErrBadHandshake with 500", err, resp)
		}
		body, _ := io.ReadAll(resp.Body)
		if string(body) != netHTTPMessage {
			t.Errorf("body %q, want %q", body, netHTTPMessage)
		}
		for _, k := range []string{"Upgrade", "Connection", "Sec-WebSocket-Accept", "Sec-WebSocket-Protocol", "Sec-WebSocket-Extensions"} {
			if v, ok := resp.Header[http.CanonicalHeaderKey(k)]; ok && (k != "Connection" || v[0] != "close") {
				t.Errorf("the 500 has %s: %q", k, v)
			}
		}
		t.Logf("Dial: %v; body %q", err, body)
	}
	t.Run("Upgrade", func(t *testing.T) {
		dial(t, "/call")
		err := <-errs
		if !errors.Is(err, ws.ErrNotHttpd) || !errors.Is(err, httpd.ErrNotUpgrade) {
			t.Errorf("Upgrade: %v, want ErrNotHttpd and httpd.ErrNotUpgrade", err)
		}
		if err.Error()+"\n" != netHTTPMessage {
			t.Errorf("Upgrade: %q, want %q", err, netHTTPMessage)
		}
		if s := logged.String(); s != "" {
			t.Errorf("logged %q; Upgrade returns its error, the handler logs", s)
		}
	})
	t.Run("Mounted", func(t *testing.T) {
		dial(t, "/mounted")
		if s := logged.String(); s != netHTTPMessage {
			t.Errorf("ErrorLog got %q, want %q", s, netHTTPMessage)
		}
	})
}

// hiddenWriter wraps a ResponseWriter without an Unwrap method, as some
// middleware does: httpd.Switch cannot find the server's underneath.
type hiddenWriter struct{ http.ResponseWriter }

// TestUpgradeHiddenWriter: on httpd, a ResponseWriter that does not
// unwrap to the server's is refused as net/http's is, the message naming
// its type.
func TestUpgradeHiddenWriter(t *testing.T) {
	u := &ws.Upgrader{Handler: ws.BaseHandler{}}
	errs := make(chan error, 1)
	mux := http.NewServeMux()
	mux.HandleFunc("/ws", func(w http.ResponseWriter, r *http.Request) {
		_, err := u.Upgrade(hiddenWriter{w}, r, u.Handler)
		errs <- err
	})
	addr := serveMux(t, mux)
	resp := handshake(t, addr, "GET /ws HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n")
	body, _ := io.ReadAll(resp.Body)
	const want = "ws: Upgrade needs an httpd.Server's ResponseWriter (or one whose Unwrap method returns it); this is a ws_test.hiddenWriter"
	if resp.StatusCode != http.StatusInternalServerError || string(body) != want+"\n" || resp.Header.Get("Sec-WebSocket-Accept") != "" {
		t.Errorf("got %s %q (Sec-WebSocket-Accept %q), want 500 %q", resp.Status, body, resp.Header.Get("Sec-WebSocket-Accept"), want)
	}
	if err := <-errs; !errors.Is(err, ws.ErrNotHttpd) || err.Error() != want {
		t.Errorf("Upgrade: %v, want ErrNotHttpd: %q", err, want)
	}
}

// nodeClient connects node's npm ws client to the URL in argv and prints
// the error it reports, or "opened".
const nodeClient = `
const WebSocket = require('ws');
const c = new WebSocket(process.argv[1]);
c.on('open', () => { console.log('opened'); process.exit(1); });
c.on('error', (e) => { console.log(e.message); process.exit(0); });
`

// TestUpgradeOnNetHTTPNode: node's ws client, the one most browsers'
// developers test with, reports the 500 of an Upgrader mounted on
// net/http's server.
func TestUpgradeOnNetHTTPNode(t *testing.T) {
	modules := testkit.NodeModules(t)
	url, _, logged := startNetHTTP(t)
	ctx, cancel := context.WithTimeout(context.Background(), hostileTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", "-e", nodeClient, url+"/mounted")
	cmd.Env = append(os.Environ(), "NODE_PATH="+modules)
	out, err := cmd.CombinedOutput()
	t.Logf("node: %s", out)
	if err != nil {
		t.Fatalf("node: %v", err)
	}
	if got, want := string(out), "Unexpected server response: 500\n"; got != want {
		t.Errorf("node printed %q, want %q", got, want)
	}
	if s := logged.String(); s != netHTTPMessage {
		t.Errorf("ErrorLog got %q, want %q", s, netHTTPMessage)
	}
}
