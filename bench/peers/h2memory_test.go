//go:build linux

package peers

import (
	"crypto/tls"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

var h2TransferBytes = flag.Int64("h2.transfer", 1<<30, "BenchmarkH2Transfer: the bytes of each download and upload, one stream each")

// h2GoPeers are the peers with the launcher's "mem" command (Go
// servers serving H2Handler): the memory and transfer benchmarks'.
func h2GoPeers() []h2Peer {
	return h2PeersNamed(func(p h2Peer) bool { return !p.h1 && p.plain != "" })
}

// h2IdleClientConfig is the TLS client of the idle connections:
// benchClientConfig with X25519 alone, the cheapest key exchange for the
// one client core making 10,000 handshakes (what a connection keeps
// afterwards does not depend on it).
func h2IdleClientConfig(tb testing.TB) *tls.Config {
	cfg := benchClientConfig(tb)
	cfg.CurvePreferences = []tls.CurveID{tls.X25519}
	return cfg
}

// BenchmarkH2IdleMemory is BenchmarkHTTPIdleMemory over HTTP/2, httpd
// against net/http (h2GoPeers), h2c with prior knowledge and h2 over TLS
// (-h2.transports): at 1,000 and 10,000 connections, each of which has
// sent the preface, completed one GET /plaintext on stream 1 (answer
// checked, the server's SETTINGS acknowledged) and stays open and
// silent. The server runs in a process of its own pinned to one CPU with
// GOMAXPROCS=1 (cmd/serve). It reports rss-B/conn (VmRSS of
// /proc/<pid>/status), heap-B/conn (the Go heap in use after a GC) and
// goroutines/conn (runtime.NumGoroutine in the server process) per
// connection, after a warm-up of 64 connections opened and closed
// (idleMemory, shared with the HTTP/1.1 and echo benchmarks). Neither
// server has an idle timeout shorter than the measurement (net/http
// none; httpd 60 s). 10,000 is skipped, saying so, if RLIMIT_NOFILE does
// not allow it. Run it with -benchtime=1x.
func BenchmarkH2IdleMemory(b *testing.B) {
	serverCPU, ok := pinClient(b, 2)
	if !ok {
		return
	}
	for _, tr := range h2TransportList(b) {
		useTLS := tr == "tls"
		for _, n := range idleCounts {
			for _, p := range h2GoPeers() {
				b.Run(fmt.Sprintf("%s/conns=%d/%s", tr, n, p.name), func(b *testing.B) {
					skipUnlessFiles(b, n)
					srv := p.start(b, useTLS, serverCPU).(*child)
					defer func() {
						if err := srv.stop(); err != nil {
							b.Error(err)
						}
					}()
					var cfg *tls.Config
					if useTLS {
						cfg = h2IdleClientConfig(b)
					}
					idleMemory(b, srv, n, func(n int) (func(), error) { return openIdleH2(srv.addr, cfg, n) })
				})
			}
		}
	}
}

// openIdleH2 opens n HTTP/2 connections to addr (h2c, or over TLS with
// cfg), eight at a time, each completing one GET /plaintext (checked),
// and leaves them open; closeAll closes them.
func openIdleH2(addr string, cfg *tls.Config, n int) (closeAll func(), err error) {
	conns := make([]net.Conn, n)
	closeAll = func() {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
	}
	var (
		mu    sync.Mutex
		first error
		next  int
		wg    sync.WaitGroup
	)
	scheme := "http"
	if cfg != nil {
		scheme = "https"
	}
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				i := next
				next++
				stop := first != nil || i >= n
				mu.Unlock()
				if stop {
					return
				}
				c, err := h2Dial(addr, cfg)
				if err == nil {
					var st *h2Stream
					if _, st, err = h2Get(c, scheme, addr, RoutePlaintext); err == nil {
						err = st.check(false)
					}
					if err == nil {
						err = c.SetDeadline(time.Time{})
					}
					if err != nil {
						c.Close()
						c = nil
					}
				}
				mu.Lock()
				conns[i] = c
				if err != nil && first == nil {
					first = fmt.Errorf("connection %d of %d: %w", i+1, n, err)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if first != nil {
		closeAll()
		return nil, first
	}
	return closeAll, nil
}

// BenchmarkH2Transfer moves -h2.transfer bytes (1 GiB) over one HTTP/2
// stream, httpd against net/http (h2GoPeers), h2c and over TLS: a
// download (GET DownloadPath, the handler writing 62.75 KiB blocks of
// TransferPattern) and an upload (POST UploadPath, the handler reading
// into a 64 KiB buffer and counting), with net/http's client (its
// HTTP/2 transport, default windows) in this process pinned to the
// second CPU; the server in a process of its own pinned to the first
// with GOMAXPROCS=1. The client checks every byte of a download and the
// count of an upload. For each of -h2.rounds rounds, each transport,
// direction and server in turn, a fresh server and connection: an
// unmeasured transfer of 16 MiB, then the server's RSS after a GC
// (the launcher's "mem") and its high-water mark reset (5 written to
// /proc/<pid>/clear_refs), then the transfer. It reports:
//
//   - peak-rss-MiB: the growth of the server's peak RSS (VmHWM) over its
//     RSS before: what a server that buffers a stream's data, rather
//     than pass it on under flow control, shows;
//   - rss-after-MiB: the growth of its RSS at the end, once quiet, before
//     any GC: memory the transfer left behind;
//   - MiB/s, and cpu-µs/MiB: the server's CPU time per MiB moved;
//   - server-util-% and client-util-% (this process's CPU time).
//
// The measurement ignores b.N: run it with -benchtime=1x.
func BenchmarkH2Transfer(b *testing.B) {
	serverCPU, ok := pinClient(b, 1)
	if !ok {
		return
	}
	if *h2TransferBytes <= 0 {
		b.Fatal("-h2.transfer must be positive")
	}
	for range *h2Rounds {
		for _, tr := range h2TransportList(b) {
			useTLS := tr == "tls"
			for _, dir := range []string{"download", "upload"} {
				for _, p := range h2GoPeers() {
					b.Run(tr+"/"+dir+"/"+p.name, func(b *testing.B) {
						srv := p.start(b, useTLS, serverCPU).(*child)
						defer func() {
							if err := srv.stop(); err != nil {
								b.Error(err)
							}
						}()
						h2TransferCell(b, srv, useTLS, dir == "upload")
					})
				}
			}
		}
	}
}

// h2TransferCell is one cell of BenchmarkH2Transfer.
func h2TransferCell(b *testing.B, srv *child, useTLS, upload bool) {
	cl := h2TransferClient(b, useTLS)
	defer cl.CloseIdleConnections()
	scheme := "http"
	if useTLS {
		scheme = "https"
	}
	base := scheme + "://" + srv.addr
	if err := h2Transfer(cl, base, upload, 16<<20); err != nil {
		b.Fatalf("warm-up: %v", err)
	}
	if err := quiet(srv.Pid()); err != nil {
		b.Fatal(err)
	}
	if _, err := srv.ask("mem", "mem"); err != nil { // a GC
		b.Fatal(err)
	}
	rss0, err := vmRSS(srv.Pid())
	if err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", srv.Pid()), []byte("5"), 0); err != nil {
		b.Fatalf("reset the server's peak RSS: %v", err)
	}
	n := *h2TransferBytes
	w, err := measure(srv.Pid(), b, func() error { return h2Transfer(cl, base, upload, n) })
	if err != nil {
		b.Fatal(err)
	}
	hwm, err := procStatusBytes(srv.Pid(), "VmHWM")
	if err != nil {
		b.Fatal(err)
	}
	rss1, err := vmRSS(srv.Pid())
	if err != nil {
		b.Fatal(err)
	}
	mib := float64(n) / (1 << 20)
	b.ReportMetric(float64(hwm-rss0)/(1<<20), "peak-rss-MiB")
	b.ReportMetric(float64(rss1-rss0)/(1<<20), "rss-after-MiB")
	b.ReportMetric(mib/w.wall.Seconds(), "MiB/s")
	b.ReportMetric(w.serverCPU.Seconds()*1e6/mib, "cpu-µs/MiB")
	w.report(b)
}

// h2TransferClient returns net/http's client speaking HTTP/2 only: with
// prior knowledge (h2c), or over TLS by ALPN with the benchmarks' client
// configuration.
func h2TransferClient(tb testing.TB, useTLS bool) *http.Transport {
	p := new(http.Protocols)
	tr := &http.Transport{Protocols: p}
	if useTLS {
		p.SetHTTP2(true)
		tr.TLSClientConfig = benchClientConfig(tb)
	} else {
		p.SetUnencryptedHTTP2(true)
	}
	return tr
}

// h2Transfer downloads n bytes from base's DownloadPath, every byte
// checked against TransferPattern, or uploads n bytes of it to
// UploadPath, the server's count checked; over HTTP/2, or it fails.
func h2Transfer(cl *http.Transport, base string, upload bool, n int64) error {
	var req *http.Request
	var err error
	if upload {
		req, err = http.NewRequest(http.MethodPost, base+UploadPath, &patternReader{left: n})
		if req != nil {
			req.ContentLength = n
		}
	} else {
		req, err = http.NewRequest(http.MethodGet, base+DownloadPath+"?bytes="+strconv.FormatInt(n, 10), nil)
	}
	if err != nil {
		return err
	}
	resp, err := cl.RoundTrip(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.ProtoMajor != 2 {
		return fmt.Errorf("%s %s: %s, want HTTP/2", req.Method, req.URL.Path, resp.Proto)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s %s: status %s", req.Method, req.URL.Path, resp.Status)
	}
	if upload {
		body, err := io.ReadAll(io.LimitReader(resp.Body, 1024))
		if err != nil {
			return err
		}
		if want := "received " + strconv.FormatInt(n, 10); string(body) != want {
			return fmt.Errorf("upload: the server answered %q, want %q", body, want)
		}
		return nil
	}
	buf := make([]byte, 256<<10)
	var off int64
	for {
		m, err := resp.Body.Read(buf)
		if !CheckTransfer(buf[:m], off) {
			return fmt.Errorf("download: bytes %d to %d are not the pattern", off, off+int64(m))
		}
		off += int64(m)
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("download: after %d bytes: %w", off, err)
		}
	}
	if off != n {
		return fmt.Errorf("download: %d bytes, want %d", off, n)
	}
	return nil
}

// patternReader reads left bytes of TransferPattern, then io.EOF.
type patternReader struct {
	off, left int64
}

func (r *patternReader) Read(p []byte) (int, error) {
	if r.left == 0 {
		return 0, io.EOF
	}
	n := 0
	for n < len(p) && r.left > 0 {
		m := copy(p[n:min(int64(len(p)), int64(n)+r.left)], TransferPattern(r.off, len(p)-n))
		n += m
		r.off += int64(m)
		r.left -= int64(m)
	}
	return n, nil
}

// procStatusBytes returns a "kB" field of /proc/<pid>/status (VmHWM,
// VmRSS), in bytes.
func procStatusBytes(pid int, field string) (int64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(data)) {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			f := strings.Fields(v)
			if len(f) != 2 || f[1] != "kB" {
				return 0, fmt.Errorf("/proc/%d/status: %q", pid, line)
			}
			kb, err := strconv.ParseInt(f[0], 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("/proc/%d/status has no %s", pid, field)
}

// TestH2Transfer runs the transfer benchmark's client against each Go
// peer, h2c and over TLS, with 3 MiB each way (every byte of the
// download checked), and the pattern's own helpers.
func TestH2Transfer(t *testing.T) {
	if testing.Short() {
		t.Skip("builds cmd/serve")
	}
	r := &patternReader{left: 1000}
	got, err := io.ReadAll(io.MultiReader(io.LimitReader(r, 3), r))
	if err != nil || len(got) != 1000 || !CheckTransfer(got, 0) || CheckTransfer(got[1:], 0) {
		t.Fatalf("patternReader: %d bytes, %v", len(got), err)
	}
	for _, p := range h2Peers {
		if p.h1 || p.plain == "" {
			continue
		}
		for _, useTLS := range []bool{false, true} {
			tr := "h2c"
			if useTLS {
				tr = "tls"
			}
			t.Run(tr+"/"+p.name, func(t *testing.T) {
				if p.name == "httpd" {
					skipUnlessHTTPDSpeaksH2(t)
				}
				srv := p.start(t, useTLS, -1).(*child)
				defer func() {
					if err := srv.stop(); err != nil {
						t.Error(err)
					}
				}()
				cl := h2TransferClient(t, useTLS)
				defer cl.CloseIdleConnections()
				base := "http://" + srv.addr
				if useTLS {
					base = "https://" + srv.addr
				}
				for _, upload := range []bool{false, true} {
					if err := h2Transfer(cl, base, upload, 3<<20+17); err != nil {
						t.Fatal(err)
					}
				}
			})
		}
	}
}
