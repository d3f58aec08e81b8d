package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gracepoll/gracepoll/internal/selfsigned"
	"github.com/gracepoll/gracepoll/internal/testkit"
	"github.com/gracepoll/gracepoll/ws"
)

// timeout bounds every wait of the tests.
const timeout = 20 * time.Second

// chat is the program running in the test, through run: the path main
// takes, with ctx's cancellation standing for SIGINT or SIGTERM.
type chat struct {
	addr   string // 127.0.0.1:port
	url    string // ws:// or wss://localhost:port/ws
	base   string // http:// or https://localhost:port
	caFile string // with -tls-self-signed
	out    *testkit.SyncBuffer
	errOut *testkit.SyncBuffer
	stop   context.CancelFunc
	done   chan error
}

// startChat runs the program with args on a free port until the test
// ends (or stop), and checks that it then returns nil.
func startChat(t *testing.T, args ...string) *chat {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	c := &chat{out: &testkit.SyncBuffer{}, errOut: &testkit.SyncBuffer{}, stop: cancel, done: make(chan error, 1)}
	secure := false
	for _, a := range args {
		secure = secure || a == "-tls-self-signed"
	}
	if secure {
		c.caFile = filepath.Join(t.TempDir(), "ca.pem")
		args = append(args, "-tls-cacert-out", c.caFile)
	}
	ready := make(chan net.Addr, 1)
	go func() { c.done <- run(ctx, append([]string{"-addr", "127.0.0.1:0"}, args...), c.out, c.errOut, ready) }()
	select {
	case a := <-ready:
		c.addr = a.String()
	case err := <-c.done:
		t.Fatalf("run: %v\n%s", err, c.errOut)
	}
	_, port, _ := net.SplitHostPort(c.addr)
	c.base, c.url = "http://"+c.addr, "ws://"+c.addr+"/ws"
	if secure {
		c.base, c.url = "https://localhost:"+port, "wss://localhost:"+port+"/ws"
	}
	t.Cleanup(func() {
		if err := c.shutdown(); err != nil {
			t.Errorf("run: %v\nstdout:\n%s\nstderr:\n%s", err, c.out, c.errOut)
		}
	})
	return c
}

// shutdown ends run as SIGTERM would and returns what run returned.
func (c *chat) shutdown() error {
	c.stop()
	select {
	case err := <-c.done:
		c.done <- err // for a second call
		return err
	case <-time.After(timeout):
		return errors.New("run did not return after its context ended")
	}
}

// peer is a Go client of the room, with a goroutine reading its events.
type peer struct {
	t      *testing.T
	c      *ws.ClientConn
	name   string // the name the server gave it
	events chan event
	end    chan *ws.CloseError // how the connection ended, once it has
	// skipped are the events nextMsg passed over.
	skipped []event
	// pending are events read by dial, still to be returned by next.
	pending []event
}

// dial joins the room as nick, waits for the server's hello, and reads
// events until the connection ends. read false leaves the connection
// unread (a client that never reads): no goroutine, no hello awaited.
func (ch *chat) dial(t *testing.T, nick string, compress, read bool) *peer {
	t.Helper()
	d := ws.Dialer{Compression: compress}
	if ch.caFile != "" {
		pool, err := selfsigned.LoadPool(ch.caFile)
		if err != nil {
			t.Fatal(err)
		}
		d.TLSConfig = &tls.Config{RootCAs: pool}
		// localhost may resolve to ::1 first; the server listens on
		// 127.0.0.1.
		d.NetDial = func(ctx context.Context, network, _ string) (net.Conn, error) {
			var nd net.Dialer
			return nd.DialContext(ctx, network, ch.addr)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	c, _, err := d.Dial(ctx, ch.url+"?name="+nick)
	if err != nil {
		t.Fatalf("dial %s: %v", nick, err)
	}
	t.Cleanup(func() { c.CloseNow() })
	if c.Compressed() != compress {
		t.Errorf("%s: compression %v, asked for %v", nick, c.Compressed(), compress)
	}
	cl := &peer{t: t, c: c, events: make(chan event, 100000), end: make(chan *ws.CloseError, 1)}
	if !read {
		return cl
	}
	go func() {
		for {
			op, data, err := c.ReadMessage()
			if err != nil {
				var ce *ws.CloseError
				errors.As(err, &ce)
				cl.end <- ce
				close(cl.events)
				return
			}
			var e event
			if op != ws.OpText || json.Unmarshal(data, &e) != nil {
				t.Errorf("%s: a %v message that is not an event: %q", nick, op, data)
				continue
			}
			cl.events <- e
		}
	}()
	hello := cl.next()
	if hello.Kind != "hello" || !strings.HasPrefix(hello.From, nick+"#") {
		t.Fatalf("%s: first event %+v, want its hello", nick, hello)
	}
	cl.name = hello.From
	// The server sends the hello just before it puts the client in the
	// room, and broadcasts its join after: until the client sees its own
	// join, a message broadcast meanwhile may not reach it.
	for {
		e := cl.recv()
		cl.pending = append(cl.pending, e)
		if e.Kind == "join" && e.From == cl.name {
			return cl
		}
	}
}

// next returns the next event, failing the test after timeout.
func (cl *peer) next() event {
	cl.t.Helper()
	if len(cl.pending) > 0 {
		e := cl.pending[0]
		cl.pending = cl.pending[1:]
		return e
	}
	return cl.recv()
}

// recv returns the next event from the connection, failing the test
// after timeout.
func (cl *peer) recv() event {
	cl.t.Helper()
	select {
	case e, ok := <-cl.events:
		if !ok {
			cl.t.Fatalf("%s: connection ended: %v", cl.name, <-cl.end)
		}
		return e
	case <-time.After(timeout):
		cl.t.Fatalf("%s: no event in %v", cl.name, timeout)
	}
	return event{}
}

// nextMsg returns the next chat message, skipping joins and leaves (kept
// in skipped).
func (cl *peer) nextMsg() event {
	cl.t.Helper()
	for {
		e := cl.next()
		if e.Kind == "msg" {
			return e
		}
		cl.skipped = append(cl.skipped, e)
	}
}

// waitJoin waits for name's join.
func (cl *peer) waitJoin(prefix string) string {
	cl.t.Helper()
	for {
		if e := cl.next(); e.Kind == "join" && strings.HasPrefix(e.From, prefix) {
			return e.From
		}
	}
}

// closed waits for the connection's end.
func (cl *peer) closed() *ws.CloseError {
	cl.t.Helper()
	for {
		select {
		case _, ok := <-cl.events:
			if !ok {
				return <-cl.end
			}
		case <-time.After(timeout):
			cl.t.Fatalf("%s: still open after %v", cl.name, timeout)
			return nil
		}
	}
}

func (cl *peer) send(text string) {
	cl.t.Helper()
	if err := cl.c.WriteMessage(ws.OpText, []byte(text)); err != nil {
		cl.t.Fatalf("%s: send: %v", cl.name, err)
	}
}

// TestBroadcast: every message reaches every client, the sender
// included, in the order each sender sent them, with and without
// compression, over ws:// and wss://.
func TestBroadcast(t *testing.T) {
	for _, args := range [][]string{nil, {"-tls-self-signed"}} {
		t.Run(fmt.Sprint(args), func(t *testing.T) {
			ch := startChat(t, args...)
			const n, m = 8, 30
			clients := make([]*peer, n)
			for i := range clients {
				clients[i] = ch.dial(t, fmt.Sprintf("c%d", i), i%2 == 1, true)
			}
			var wg sync.WaitGroup
			for i, cl := range clients {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for j := range m {
						// Long enough for the compressed clients to
						// receive some compressed frames.
						text := fmt.Sprintf("%d %d %s", i, j, strings.Repeat("la ", i*10))
						if err := cl.c.WriteMessage(ws.OpText, []byte(text)); err != nil {
							t.Errorf("c%d: %v", i, err)
							return
						}
					}
				}()
			}
			wg.Wait()
			for _, cl := range clients {
				next := map[string]int{} // sender's name: its next sequence number
				for range n * m {
					e := cl.nextMsg()
					var i, j int
					if _, err := fmt.Sscanf(e.Text, "%d %d", &i, &j); err != nil || e.From != clients[i].name {
						t.Fatalf("%s: message %+v not from the client it names", cl.name, e)
					}
					if j != next[e.From] {
						t.Fatalf("%s: from %s got #%d, want #%d (lost or reordered)", cl.name, e.From, j, next[e.From])
					}
					next[e.From]++
				}
				for _, other := range clients {
					if next[other.name] != m {
						t.Errorf("%s: %d messages from %s, want %d", cl.name, next[other.name], other.name, m)
					}
				}
			}
			// The page is served too, over the same scheme.
			if ch.caFile == "" {
				resp, err := http.Get(ch.base + "/")
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 || !bytes.Equal(body, page) || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
					t.Errorf("GET /: %s %q, %d bytes", resp.Status, resp.Header.Get("Content-Type"), len(body))
				}
			}
		})
	}
}

// TestSlowReader: a client that never reads while another floods the
// room is dropped at the output limit, and the clients that read get
// every message, promptly, and stay connected.
func TestSlowReader(t *testing.T) {
	// The rate limit is set above the flood's pace: here the flooder is
	// a chatty user the room allows, not one it closes (TestLimits).
	ch := startChat(t, "-max-unread", "1048576", "-rate", "16e6", "-burst", "4e6")
	// Uncompressed: compressing 12 MiB under -race would be the
	// bottleneck, not the room.
	flooder := ch.dial(t, "flooder", false, true)
	watcher := ch.dial(t, "watcher", false, true)
	silent := ch.dial(t, "silent", false, false)
	silentName := watcher.waitJoin("silent#")

	// 12 MiB through the room at about 8 MB/s: more than the silent
	// client's socket buffers (the server's send buffer grows to
	// tcp_wmem's 4 MiB) and the 1 MiB limit together, so it must be
	// dropped; a pace that clients that read keep up with, even under
	// -race. (A flooder faster than its readers gets them dropped too:
	// that is what -rate is for.)
	const count, size = 384, 32 << 10
	pad := strings.Repeat("x", size)
	sent := make([]time.Time, count)
	var sentMu sync.Mutex
	go func() {
		tick := time.NewTicker(4 * time.Millisecond)
		defer tick.Stop()
		for i := range count {
			<-tick.C
			sentMu.Lock()
			sent[i] = time.Now()
			sentMu.Unlock()
			if err := flooder.c.WriteMessage(ws.OpText, []byte(fmt.Sprintf("%d %s", i, pad))); err != nil {
				t.Errorf("flood: %v", err)
				return
			}
		}
	}()
	var worst time.Duration
	worstAt, leftAt := 0, -1
	for i := range count {
		e := watcher.nextMsg()
		var j int
		if _, err := fmt.Sscanf(e.Text, "%d", &j); err != nil || j != i || e.From != flooder.name {
			t.Fatalf("watcher: message %d is %.40q from %s", i, e.Text, e.From)
		}
		// sent[i] was written before the message left the flooder.
		sentMu.Lock()
		if d := time.Since(sent[i]); d > worst {
			worst, worstAt = d, i
		}
		sentMu.Unlock()
		if len(watcher.skipped) > 0 && leftAt < 0 {
			leftAt = i
		}
	}
	t.Logf("the watcher got %d messages of %d KiB, each within %v of its sending (the slowest #%d; leave at #%d)", count, size>>10, worst, worstAt, leftAt)
	// Generous for -race on 2 cores (tens to hundreds of ms is usual).
	// A room whose broadcast waited for the silent client would stall
	// until the ping timeout (60 s) took it out.
	if worst > 2*time.Second {
		t.Errorf("a message took %v to reach a client that reads", worst)
	}
	for range count {
		if e := flooder.nextMsg(); e.From != flooder.name {
			t.Fatalf("flooder got %+v", e)
		}
	}
	// The silent client was dropped: the others were told it left, the
	// log says why, and its connection is reset once its buffers are
	// read.
	if !slices.Contains(watcher.skipped, event{Kind: "leave", From: silentName}) {
		t.Errorf("the watcher was not told that %s left; it got %+v", silentName, watcher.skipped)
	}
	if !strings.Contains(ch.errOut.String(), silentName+" (") || !strings.Contains(ch.errOut.String(), "dropped") {
		t.Errorf("the log does not say the silent client was dropped:\n%s", ch.errOut)
	}
	silent.c.SetReadDeadline(time.Now().Add(timeout))
	var received int
	for {
		_, data, err := silent.c.ReadMessage()
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				t.Errorf("the silent client's connection was not closed")
			}
			break
		}
		received += len(data)
	}
	if received >= count*size {
		t.Errorf("the silent client received all %d bytes: not dropped", received)
	}
	t.Logf("the silent client had %d KiB in its buffers when it was dropped", received>>10)
	// The others are still in the room.
	watcher.send("still here")
	if e := flooder.nextMsg(); e.Text != "still here" || e.From != watcher.name {
		t.Errorf("after the drop: %+v", e)
	}
}

// TestLimits: a message over -max-message is refused with 1009, a
// binary one with 1003, a client over -rate closed with 1008; the room
// goes on for the others.
func TestLimits(t *testing.T) {
	ch := startChat(t, "-max-message", "1024", "-rate", "2048", "-burst", "8192")
	watcher := ch.dial(t, "watcher", false, true)

	big := ch.dial(t, "big", false, true)
	big.c.WriteMessage(ws.OpText, bytes.Repeat([]byte("a"), 1025))
	if ce := big.closed(); ce == nil || ce.Code != ws.StatusTooBig {
		t.Errorf("a message of 1025 bytes: %v, want 1009", ce)
	}

	bin := ch.dial(t, "bin", false, true)
	bin.c.WriteMessage(ws.OpBinary, []byte{1, 2, 3})
	if ce := bin.closed(); ce == nil || ce.Code != ws.StatusUnsupportedData {
		t.Errorf("a binary message: %v, want 1003", ce)
	}

	// 8192 bytes of burst: 32 messages at the 256-byte minimum cost.
	fast := ch.dial(t, "fast", false, true)
	for range 100 {
		if fast.c.WriteMessage(ws.OpText, []byte("spam")) != nil {
			break
		}
	}
	if ce := fast.closed(); ce == nil || ce.Code != ws.StatusPolicyViolation {
		t.Errorf("100 messages at once: %v, want 1008", ce)
	}
	got := 0
	for {
		e := watcher.next()
		if e.Kind == "leave" && e.From == fast.name {
			break
		}
		if e.Kind == "msg" && e.From == fast.name {
			got++
		}
	}
	if got < 20 || got > 40 {
		t.Errorf("the watcher got %d of the fast client's messages, want the burst's 32 or so", got)
	}
	watcher.send("ok")
	if e := watcher.nextMsg(); e.Text != "ok" {
		t.Errorf("the watcher got %+v", e)
	}
}

// TestShutdown: SIGTERM's path (run's context ending) sends every client
// 1001 and run returns nil having shut down cleanly.
func TestShutdown(t *testing.T) {
	ch := startChat(t)
	var clients []*peer
	for i := range 5 {
		clients = append(clients, ch.dial(t, fmt.Sprintf("c%d", i), i%2 == 0, true))
	}
	clients[4].send("before")
	for _, cl := range clients {
		if e := cl.nextMsg(); e.Text != "before" {
			t.Fatalf("%s: %+v", cl.name, e)
		}
	}
	if err := ch.shutdown(); err != nil {
		t.Fatal(err)
	}
	for _, cl := range clients {
		ce := cl.closed()
		if ce == nil || ce.Code != ws.StatusGoingAway || !ce.Remote {
			t.Errorf("%s: %v, want 1001 from the server", cl.name, ce)
		}
	}
	out := ch.out.String()
	for _, want := range []string{"shutting down: 5 clients connected", "shut down cleanly"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// TestFlags: bad flags are refused before anything is served.
func TestFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-tls-cacert-out", "x.pem"},
		{"-max-message", "0"},
		{"-burst", "100"},
		{"extra"},
	} {
		var out, errOut bytes.Buffer
		if err := run(context.Background(), args, &out, &errOut, nil); err == nil {
			t.Errorf("run %q: no error", args)
		}
	}
	// Refused for what it means, not as an unknown flag: the name is the
	// one the README and the other examples give.
	err := run(context.Background(), []string{"-tls-cacert-out", "x.pem"}, io.Discard, io.Discard, nil)
	if err == nil || err.Error() != "-tls-cacert-out needs -tls-self-signed" {
		t.Errorf("-tls-cacert-out without -tls-self-signed: %v", err)
	}
}

// TestLogLines: how a connection ended reads once and plainly in the log:
// a failure's reason is often its cause's text, said once; what a client
// sent is quoted, so that it cannot forge a line.
func TestLogLines(t *testing.T) {
	rm := newRoom(limits{maxUnread: 1 << 20}, nil)
	protocol := fmt.Errorf("%w: unmasked client frame", ws.ErrProtocol)
	for _, c := range []struct {
		err  ws.CloseError
		want string
	}{
		{ws.CloseError{Code: ws.StatusNormal, Remote: true}, "left"},
		{ws.CloseError{Code: ws.StatusGoingAway, Remote: true}, "left"},
		{ws.CloseError{Code: ws.StatusNormal, Reason: "bye\nchat: forged", Remote: true}, `left: "bye\nchat: forged"`},
		{ws.CloseError{Code: 4000, Reason: "custom", Remote: true}, `left with 4000: "custom"`},
		{ws.CloseError{Code: ws.StatusAbnormal, Err: io.ErrUnexpectedEOF}, "disconnected without a close frame: unexpected EOF"},
		{ws.CloseError{Code: ws.StatusProtocolError, Reason: protocol.Error(), Err: protocol}, "closed by the server with 1002: ws: protocol error: unmasked client frame"},
		{ws.CloseError{Code: ws.StatusUnsupportedData, Reason: "text messages only"}, "closed by the server with 1003: text messages only"},
		{ws.CloseError{Code: ws.StatusPolicyViolation, Reason: "sending too fast", Err: ws.ErrCloseTimeout}, "dropped: no close frame in answer to the server's"},
		{ws.CloseError{Code: ws.StatusAbnormal, Err: fmt.Errorf("%w: queue full", ws.ErrSlowReader)}, "dropped: it left more than -max-unread (1048576 bytes) unread"},
		{ws.CloseError{Code: ws.StatusAbnormal, Err: ws.ErrPingTimeout}, "dropped: no answer to a ping in 30s"},
	} {
		if got := rm.why(&c.err); got != c.want {
			t.Errorf("%v: %q, want %q", &c.err, got, c.want)
		}
	}
	for n, want := range map[int]string{0: "0 clients", 1: "1 client", 5: "5 clients"} {
		if got := plural(n, "client"); got != want {
			t.Errorf("plural(%d): %q, want %q", n, got, want)
		}
	}
}
