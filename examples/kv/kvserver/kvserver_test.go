//go:build linux

package kvserver

import (
	"bufio"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/gracepoll/gracepoll/conn"
	"github.com/gracepoll/gracepoll/examples/kv/resp"
	"github.com/gracepoll/gracepoll/examples/kv/store"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type server struct {
	*conn.Server
	h    *Handler
	addr string
}

// start serves a fresh store on a free port of 127.0.0.1 (or on a Unix
// socket if network is "unix"); mod adjusts the handler and the options.
func start(t *testing.T, network string, mod func(*Handler, *conn.Options)) *server {
	t.Helper()
	h := New(store.New(0), 0)
	opts := h.Options()
	if mod != nil {
		mod(h, &opts)
	}
	s, err := conn.NewServer(h, opts)
	if err != nil {
		t.Fatal(err)
	}
	addr := "127.0.0.1:0"
	if network == "unix" {
		addr = filepath.Join(t.TempDir(), "kv.sock")
	}
	a, err := s.Listen(network, addr)
	if err != nil {
		s.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return &server{s, h, a.String()}
}

// waitClients waits until the server has n connections open.
func (s *server) waitClients(t *testing.T, n int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for s.h.Clients() != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d clients open, want %d; stats %+v", s.h.Clients(), n, s.Stats())
		}
		time.Sleep(time.Millisecond)
	}
}

// client is a minimal Go RESP client.
type client struct {
	t *testing.T
	c net.Conn
	r *bufio.Reader
}

func dial(t *testing.T, network, addr string) *client {
	t.Helper()
	c, err := net.Dial(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(30 * time.Second))
	t.Cleanup(func() { c.Close() })
	return &client{t, c, bufio.NewReaderSize(c, 64<<10)}
}

func (c *client) send(b []byte) {
	c.t.Helper()
	if _, err := c.c.Write(b); err != nil {
		c.t.Fatal(err)
	}
}

func (c *client) read() resp.Value {
	c.t.Helper()
	v, err := resp.ReadValue(c.r)
	if err != nil {
		c.t.Fatal(err)
	}
	return v
}

// do sends one command and returns its reply as redis-cli prints it.
func (c *client) do(args ...string) string {
	c.t.Helper()
	c.send(resp.AppendCommand(nil, args...))
	return c.read().String()
}

// expectEOF reads until the server closes the connection.
func (c *client) expectEOF() {
	c.t.Helper()
	if b, err := io.ReadAll(c.r); err != nil || len(b) > 0 {
		c.t.Fatalf("want EOF, got %q, %v", b, err)
	}
}

func TestCommandsTCPAndUnix(t *testing.T) {
	for _, network := range []string{"tcp", "unix"} {
		t.Run(network, func(t *testing.T) {
			s := start(t, network, nil)
			c := dial(t, network, s.addr)
			for _, step := range [][]string{
				{"PONG", "PING"}, {"OK", "SET", "k", "v"}, {"v", "GET", "k"}, {"(integer) 1", "DEL", "k"},
				{"(integer) 1", "INCR", "n"}, {"(integer) 2", "LPUSH", "l", "a", "b"}, {"b", "LPOP", "l"},
				{"OK", "CLIENT", "SETNAME", "x"}, {"[save ]", "CONFIG", "GET", "save"},
			} {
				if got := c.do(step[1:]...); got != step[0] {
					t.Errorf("%q: %q, want %q", step[1:], got, step[0])
				}
			}
			if got := c.do("INFO"); !strings.Contains(got, "connected_clients:1") {
				t.Errorf("INFO lacks connected_clients:1: %q", got)
			}
		})
	}
}

// TestPipelinedClients: many clients at once, each sending hundreds of
// commands in one write and then reading every reply.
func TestPipelinedClients(t *testing.T) {
	s := start(t, "tcp", nil)
	const clients, rounds = 32, 100
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			nc, err := net.Dial("tcp", s.addr)
			if err != nil {
				errs <- err
				return
			}
			defer nc.Close()
			nc.SetDeadline(time.Now().Add(30 * time.Second))
			var req []byte
			var want []string
			for j := range rounds {
				key, val := fmt.Sprint("key:", i, ":", j), fmt.Sprint("value-", i, "-", j)
				req = resp.AppendCommand(req, "SET", key, val)
				req = resp.AppendCommand(req, "GET", key)
				req = append(req, "INCR counter\r\n"...) // inline, in the middle of multibulk
				req = resp.AppendCommand(req, "RPUSH", fmt.Sprint("list:", i), val)
				want = append(want, "OK", val, "", fmt.Sprint("(integer) ", j+1))
			}
			go nc.Write(req) // replies flow while the requests are written
			r := bufio.NewReader(nc)
			for k, w := range want {
				v, err := resp.ReadValue(r)
				if err != nil {
					errs <- fmt.Errorf("client %d reply %d: %w", i, k, err)
					return
				}
				if w != "" && v.String() != w {
					errs <- fmt.Errorf("client %d reply %d: %q, want %q", i, k, v.String(), w)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	c := dial(t, "tcp", s.addr)
	if got := c.do("GET", "counter"); got != fmt.Sprint(clients*rounds) {
		t.Errorf("counter %s, want %d", got, clients*rounds)
	}
	if got := c.do("LRANGE", "list:3", "0", "1"); got != "[value-3-0 value-3-1]" {
		t.Errorf("list:3 starts %s", got)
	}
}

// TestLargeValues: 1 MB values, alone and pipelined, each arriving in
// many reads and replied to in many partial writes (small SO_SNDBUF).
func TestLargeValues(t *testing.T) {
	s := start(t, "tcp", func(_ *Handler, o *conn.Options) { o.SendBuffer = 8 << 10 })
	c := dial(t, "tcp", s.addr)
	vals := make([]string, 3)
	for i := range vals {
		b := make([]byte, 1<<20)
		for j := range b {
			b[j] = byte(rand.IntN(256)) // binary, CR and LF included
		}
		vals[i] = string(b)
	}
	if got := c.do("SET", "big", vals[0]); got != "OK" {
		t.Fatal(got)
	}
	if got := c.do("GET", "big"); got != vals[0] {
		t.Fatalf("GET big: %d bytes, differs", len(got))
	}
	var req []byte
	for i, v := range vals {
		req = resp.AppendCommand(req, "SET", fmt.Sprint("big", i), v)
	}
	for i := range vals {
		req = resp.AppendCommand(req, "GET", fmt.Sprint("big", i))
	}
	go c.c.Write(req) // 3 MB in, 3 MB out at the same time
	for range vals {
		if got := c.read().String(); got != "OK" {
			t.Fatal(got)
		}
	}
	for i, v := range vals {
		if got := c.read(); got.Str != v {
			t.Fatalf("GET big%d: %d bytes, differs", i, len(got.Str))
		}
	}
}

// TestSplitCommands: commands cut at every byte, delivered across many
// reads, are kept by conn's buffer until complete.
func TestSplitCommands(t *testing.T) {
	s := start(t, "tcp", nil)
	c := dial(t, "tcp", s.addr)
	var req []byte
	req = resp.AppendCommand(req, "SET", "split", "a\r\nvalue")
	req = append(req, "GET split\r\n"...)
	req = resp.AppendCommand(req, "ECHO", strings.Repeat("x", 300))
	for _, b := range req {
		c.send([]byte{b})
		time.Sleep(50 * time.Microsecond) // usually one read each
	}
	for _, want := range []string{"OK", "a\r\nvalue", strings.Repeat("x", 300)} {
		if got := c.read().String(); got != want {
			t.Fatalf("%q, want %q", got, want)
		}
	}
}

// TestMidCommandDisconnect: clients that close (FIN) or reset (RST) in the
// middle of a command, a 1 MB value among them, are closed and forgotten;
// nothing of their commands runs, and the server serves on.
func TestMidCommandDisconnect(t *testing.T) {
	s := start(t, "tcp", nil)
	partial := resp.AppendCommand(nil, "SET", "partial", strings.Repeat("v", 1<<20))
	cuts := []int{1, 5, 17, len(partial) / 2, len(partial) - 1}
	for round := range 4 {
		var conns []*net.TCPConn
		for _, cut := range cuts {
			nc, err := net.Dial("tcp", s.addr)
			if err != nil {
				t.Fatal(err)
			}
			tc := nc.(*net.TCPConn)
			if _, err := tc.Write(append(resp.AppendCommand(nil, "PING"), partial[:cut]...)); err != nil {
				t.Fatal(err)
			}
			conns = append(conns, tc)
		}
		for i, tc := range conns {
			tc.SetReadDeadline(time.Now().Add(10 * time.Second))
			if v, err := resp.ReadValue(bufio.NewReader(tc)); err != nil || v.Str != "PONG" {
				t.Fatalf("PING before the partial command: %v %v", v, err)
			}
			if (round+i)%2 == 1 {
				tc.SetLinger(0) // RST
			}
			tc.Close()
		}
	}
	s.waitClients(t, 0)
	c := dial(t, "tcp", s.addr)
	if got := c.do("EXISTS", "partial"); got != "(integer) 0" {
		t.Errorf("a partial command ran: EXISTS partial = %s", got)
	}
	st := s.Stats()
	if st.Accepted != int64(4*len(cuts)+1) || st.Open != 1 || st.Closed["peer-closed"]+st.Closed["reset"] != uint64(4*len(cuts)) {
		t.Errorf("stats %+v", st)
	}
}

func TestInlineAndQuit(t *testing.T) {
	s := start(t, "tcp", nil)
	c := dial(t, "tcp", s.addr)
	c.send([]byte("PING\r\nSET a \"b c\"\r\n\r\nGET a\nQUIT\r\nPING\r\n"))
	for _, want := range []string{"PONG", "OK", "b c", "OK"} {
		if got := c.read().String(); got != want {
			t.Fatalf("%q, want %q", got, want)
		}
	}
	c.expectEOF() // nothing after QUIT runs
}

// TestProtocolError: a bad request is answered with -ERR and the
// connection closed; what came before it is answered.
func TestProtocolError(t *testing.T) {
	s := start(t, "tcp", nil)
	for _, tc := range []struct{ req, want string }{
		{"PING\r\n*1\r\n$x\r\nPING\r\n", "(error) ERR Protocol error: invalid bulk length"},
		{"*1\r\n+PING\r\n", "(error) ERR Protocol error: expected '$', got '+'"},
		{"SET k \"v\r\n", "(error) ERR Protocol error: unbalanced quotes in request"},
		{"*1\r\n$999999999\r\n", "(error) ERR Protocol error: invalid bulk length"},
	} {
		c := dial(t, "tcp", s.addr)
		c.send([]byte(tc.req))
		if strings.HasPrefix(tc.req, "PING") {
			if got := c.read().String(); got != "PONG" {
				t.Fatalf("%q", got)
			}
		}
		if got := c.read().String(); got != tc.want {
			t.Errorf("%q: %q, want %q", tc.req, got, tc.want)
		}
		c.expectEOF()
	}
}

// rss returns the process's resident set size in bytes.
func rss(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		t.Fatal(err)
	}
	var size, res int64
	fmt.Sscan(string(b), &size, &res)
	return res * int64(os.Getpagesize())
}

// TestSlowPipelinedReader: a client pipelines 200 GETs of a 1 MB value and
// reads nothing for 2 s. It is served in bounded memory, as Redis serves it
// by default: the process's RSS grows by at most 64 MB (the replies are
// 200 MB), another client's PING is answered meanwhile, and then all 200
// replies arrive, byte-exact.
func TestSlowPipelinedReader(t *testing.T) {
	s := start(t, "tcp", nil)
	value := strings.Repeat("0123456789abcdef", 1<<16) // 1 MB
	a := dial(t, "tcp", s.addr)
	if got := a.do("SET", "big", value); got != "OK" {
		t.Fatal(got)
	}
	runtime.GC()
	rss0 := rss(t)
	var req []byte
	for range 200 {
		req = resp.AppendCommand(req, "GET", "big")
	}
	a.send(req)
	b := dial(t, "tcp", s.addr)
	var worst time.Duration
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		start := time.Now()
		if got := b.do("PING"); got != "PONG" {
			t.Fatalf("PING: %q", got)
		}
		worst = max(worst, time.Since(start))
	}
	grew := rss(t) - rss0
	if grew > 64<<20 {
		t.Errorf("RSS grew by %d MB while 200 MB of replies were pipelined and unread, want at most 64 MB", grew>>20)
	}
	if worst > time.Second {
		t.Errorf("another client's PING took up to %v", worst)
	}
	for i := range 200 {
		if v := a.read(); v.Str != value {
			t.Fatalf("reply %d: %d bytes, want the 1 MB value", i, len(v.Str))
		}
	}
	if got := a.do("PING"); got != "PONG" {
		t.Errorf("the slow client after its replies: PING = %q", got)
	}
	if st := s.Stats(); st.Closed["abort"] != 0 || st.LostOutput != 0 {
		t.Errorf("stats %+v: want nothing aborted or lost", st)
	}
	t.Logf("RSS grew by %.1f MB; slowest PING of the other client %v", float64(grew)/(1<<20), worst)
}

// TestMaxClientOut: with MaxClientOut set, a client whose unread replies
// queued pass it is disconnected, as Redis's client-output-buffer-limit
// does; the server serves on. (Flow control holds the queue at HighWater
// plus one reply, so only a limit below that ever bites.)
func TestMaxClientOut(t *testing.T) {
	s := start(t, "tcp", func(h *Handler, _ *conn.Options) { h.MaxClientOut = 512 << 10 })
	a := dial(t, "tcp", s.addr)
	if got := a.do("SET", "big", strings.Repeat("v", 1<<20)); got != "OK" {
		t.Fatal(got)
	}
	var req []byte
	for range 64 {
		req = resp.AppendCommand(req, "GET", "big")
	}
	a.send(req)
	time.Sleep(200 * time.Millisecond)
	n, err := io.Copy(io.Discard, a.r)
	if err == nil || n >= 64<<20 {
		t.Errorf("read %d bytes, %v: want a reset before 64 MB", n, err)
	}
	s.waitClients(t, 0)
	if st := s.Stats(); st.Closed["abort"] != 1 {
		t.Errorf("stats %+v: want one client aborted", st)
	}
	if got := dial(t, "tcp", s.addr).do("PING"); got != "PONG" {
		t.Error(got)
	}
}

// TestRedisCLI drives the server with redis-cli and redis-benchmark
// (Debian package redis-tools), when installed.
func TestRedisCLI(t *testing.T) {
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		t.Skip("redis-cli not installed (Debian package redis-tools)")
	}
	s := start(t, "tcp", nil)
	_, port, _ := net.SplitHostPort(s.addr)
	run := func(name string, args ...string) string {
		t.Helper()
		out, err := exec.Command(name, append([]string{"-h", "127.0.0.1", "-p", port}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s %q: %v\n%s", name, args, err, out)
		}
		return string(out)
	}
	for _, step := range [][]string{
		{"PONG", "ping"}, {"OK", "set", "k", "v"}, {"v", "get", "k"}, {"3", "rpush", "l", "a", "b", "c"},
		{"a\nb\nc", "lrange", "l", "0", "-1"}, {"1", "incr", "n"}, {"", "get", "nothing"},
	} {
		if got := strings.TrimSpace(run(cli, step[1:]...)); got != step[0] {
			t.Errorf("redis-cli %q: %q, want %q", step[1:], got, step[0])
		}
	}
	// Commands on standard input, as a script pipes them.
	cmd := exec.Command(cli, "-h", "127.0.0.1", "-p", port)
	cmd.Stdin = strings.NewReader("set piped 1\nincr piped\nget piped\n")
	if out, err := cmd.CombinedOutput(); err != nil || strings.Fields(string(out))[2] != "2" {
		t.Errorf("redis-cli with piped commands: %q, %v", out, err)
	}
	bench, err := exec.LookPath("redis-benchmark")
	if err != nil {
		t.Log("redis-benchmark not installed: skipped")
		return
	}
	// Every test of redis-benchmark's default run that kv has the
	// commands for: the list the README gives (the rest, SADD, HSET,
	// SPOP, ZADD, ZPOPMIN and XADD, are types kv does not keep).
	out := run(bench, "-t", "ping,set,get,incr,lpush,rpush,lpop,rpop,lrange,mset", "-n", "2000", "-q", "-c", "20", "-P", "16")
	for _, want := range []string{"PING_INLINE:", "PING_MBULK:", "SET:", "GET:", "INCR:", "LPUSH:", "RPUSH:", "LPOP:", "RPOP:",
		"LRANGE_100", "LRANGE_300", "LRANGE_500", "LRANGE_600", "MSET"} {
		if !strings.Contains(out, want+" ") || !regexpRPS(out, want) {
			t.Errorf("redis-benchmark output lacks %q with requests per second:\n%s", want, out)
		}
	}
	if strings.Contains(out, "WARN") || strings.Contains(out, "rror") {
		t.Errorf("redis-benchmark warned:\n%s", out)
	}
	s.waitClients(t, 0)
	t.Logf("redis-benchmark:\n%s", lastLines(out))
}

// regexpRPS reports whether test's final line says "N requests per
// second".
func regexpRPS(out, test string) bool {
	for _, line := range strings.Split(out, "\r") {
		for _, l := range strings.Split(line, "\n") {
			if l = strings.TrimSpace(l); strings.HasPrefix(l, test+" ") && strings.Contains(l, "requests per second") {
				return true
			}
		}
	}
	return false
}

// lastLines keeps the final line of each test (redis-benchmark -q redraws
// progress with carriage returns).
func lastLines(out string) string {
	var b strings.Builder
	for _, line := range strings.Split(out, "\n") {
		parts := strings.Split(line, "\r")
		if l := strings.TrimSpace(parts[len(parts)-1]); l != "" {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}
