//go:build linux

package httpd_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gracepoll/gracepoll/httpd"
	"github.com/gracepoll/gracepoll/internal/testkit"
	"github.com/gracepoll/gracepoll/poller"
)

// blockedFor is how long the blocked handlers of
// TestReleaseWhileHandlersBlock block.
const blockedFor = 10 * time.Second

// TestReleaseWhileHandlersBlock runs two handlers that block for
// blockedFor on their waiters, one sleeping and one writing a large
// response inline to a client that reads nothing (so it waits in
// Conn.Flush), while 1,000 other connections open, 50 at a time, each
// make a request, read the answer and close. Every one of them is closed
// on the server (its ConnState StateClosed, which runs when the poller
// releases the connection, before its descriptor is closed) within 100 ms
// of the client's close, and the process's sockets are back to what they
// were before them, all while both handlers still block: a waiter stuck in
// a handler holds back no other connection's release. On both topologies
// where a handler may block (Shared, httpd's default, and Stealing).
func TestReleaseWhileHandlersBlock(t *testing.T) {
	for _, topo := range []poller.Topology{poller.Shared, poller.Stealing} {
		t.Run(topo.String(), func(t *testing.T) {
			t.Parallel()
			testReleaseWhileHandlersBlock(t, topo)
		})
	}
}

func testReleaseWhileHandlersBlock(t *testing.T, topo poller.Topology) {
	var (
		mu       sync.Mutex
		closedAt = map[string]time.Time{} // by the client's address
	)
	sleeping, writing := make(chan struct{}), make(chan struct{})
	var blockedDone atomic.Int32
	start := time.Now()
	mux := http.NewServeMux()
	mux.HandleFunc("/sleep", func(w http.ResponseWriter, r *http.Request) {
		close(sleeping)
		time.Sleep(blockedFor)
		blockedDone.Add(1)
	})
	mux.HandleFunc("/download", func(w http.ResponseWriter, r *http.Request) {
		defer blockedDone.Add(1)
		close(writing)
		chunk := make([]byte, 64<<10)
		for time.Since(start) < blockedFor {
			if _, err := w.Write(chunk); err != nil {
				return
			}
			w.(http.Flusher).Flush()
		}
	})
	mux.HandleFunc("/light", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("light")) })
	srv := &httpd.Server{
		Handler: mux,
		// The download's client reads nothing: keep the server from
		// dropping it before blockedFor.
		IdleTimeout: 2 * blockedFor,
		ConnState: func(c net.Conn, s http.ConnState) {
			if s == http.StateClosed {
				now := time.Now()
				mu.Lock()
				closedAt[c.RemoteAddr().String()] = now
				mu.Unlock()
			}
		},
	}
	srv.Options.Poller.Topology = topo
	addr := serve(t, srv)
	port := mustPort(t, addr)

	// The two blocked handlers, each on its own waiter.
	for _, path := range []string{"/sleep", "/download"} {
		c := rawConn(t, addr)
		c.SetDeadline(time.Now().Add(3 * blockedFor))
		fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", path)
	}
	testkit.Wait(t, sleeping, timeout, "the sleeping handler")
	testkit.Wait(t, writing, timeout, "the writing handler")
	time.Sleep(50 * time.Millisecond) // the download fills the socket and waits in Flush
	baseline := sockets(t, port)

	const conns, together = 1000, 50
	var (
		cmu      sync.Mutex
		clientAt = map[string]time.Time{}
	)
	for first := 0; first < conns; first += together {
		var wg sync.WaitGroup
		for range together {
			wg.Go(func() {
				c, err := net.DialTimeout("tcp", addr, timeout)
				if err != nil {
					t.Error(err)
					return
				}
				c.SetDeadline(time.Now().Add(timeout))
				fmt.Fprintf(c, "GET /light HTTP/1.1\r\nHost: x\r\n\r\n")
				resp, err := http.ReadResponse(bufio.NewReader(c), nil)
				if err == nil {
					_, err = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				if err != nil || resp.StatusCode != http.StatusOK {
					t.Errorf("light request: %v", err)
				}
				local := c.LocalAddr().String()
				now := time.Now()
				c.Close()
				cmu.Lock()
				clientAt[local] = now
				cmu.Unlock()
			})
		}
		wg.Wait()
		if t.Failed() {
			return
		}
	}
	var lateness []time.Duration
	testkit.Eventually(t, timeout, "every light connection closed on the server", func() bool {
		mu.Lock()
		defer mu.Unlock()
		lateness = lateness[:0]
		for local, at := range clientAt {
			if c, ok := closedAt[local]; ok {
				lateness = append(lateness, c.Sub(at))
			}
		}
		return len(lateness) == conns
	})
	// OnClose (and with it StateClosed) runs just before the poller
	// closes the descriptor: give the last ones a moment.
	// The baseline may still count sockets of the setup's requests that
	// were closing (seen on a loaded machine): fewer is no leak.
	socks := baseline + 1
	for deadline := time.Now().Add(time.Second); socks > baseline && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		socks = sockets(t, port)
	}
	if blockedDone.Load() != 0 || time.Since(start) >= blockedFor {
		t.Fatalf("the blocked handlers returned (%d) or %v passed before the checks: inconclusive", blockedDone.Load(), blockedFor)
	}
	slices.Sort(lateness)
	n := len(lateness)
	t.Logf("%s: %d connections closed on the server %v (p50), %v (p99), %v (max) after the client's close, while two handlers block",
		srv.Options.Poller.Topology, n, lateness[n/2], lateness[n*99/100], lateness[n-1])
	if worst := lateness[n-1]; worst > 100*time.Millisecond {
		t.Errorf("slowest server-side close %v after the client's, want within 100ms", worst)
	}
	if socks > baseline {
		t.Errorf("%d sockets open after the light connections closed, want at most %d as before them", socks, baseline)
	}
}

// sockets counts the process's open TCP sockets to or from port (client
// and server ends alike, both in this process): its fds' socket inodes,
// looked up in /proc/net/tcp.
func sockets(t testing.TB, port int) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	ours := map[string]bool{}
	for _, e := range ents {
		target, err := os.Readlink("/proc/self/fd/" + e.Name())
		if inode, ok := strings.CutPrefix(target, "socket:["); err == nil && ok {
			ours[strings.TrimSuffix(inode, "]")] = true
		}
	}
	hexPort := fmt.Sprintf(":%04X", port)
	n := 0
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(table)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			f := strings.Fields(line)
			if len(f) > 9 && ours[f[9]] && (strings.HasSuffix(f[1], hexPort) || strings.HasSuffix(f[2], hexPort)) {
				n++
			}
		}
	}
	return n
}

func mustPort(t testing.TB, addr string) int {
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
