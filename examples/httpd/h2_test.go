//go:build linux

package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"html"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gracepoll/gracepoll/internal/selfsigned"
)

// The HTTP/2 tests run each client over both ways into HTTP/2: TLS with
// h2 chosen by ALPN (the server's default Protocols), and plain TCP with
// prior knowledge (h2c, the -h2c flag's Protocols).

// modes names the two ways, for subtests.
var modes = []struct {
	name   string
	secure bool
}{{"h2c", false}, {"TLS", true}}

// serveH2 serves the site so that HTTP/2 is reached the way secure says.
func serveH2(t testing.TB, secure bool) *served {
	t.Helper()
	if secure {
		return serveSiteWith(t, true, nil)
	}
	return serveSiteWith(t, false, h2cProtocols())
}

// open is how many connections the server holds.
func (s *served) open() int64 {
	if tr := s.srv.Transport(); tr != nil {
		return tr.Stats().Open
	}
	return 0
}

// waitOpen waits up to d for the server to hold at most n connections
// and returns how many it holds.
func (s *served) waitOpen(n int64, d time.Duration) int64 {
	deadline := time.Now().Add(d)
	for {
		open := s.open()
		if open <= n || time.Now().After(deadline) {
			return open
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// expectClosed checks that the server closed every connection of a
// client that has exited (the kernel closed the client's side): one left
// open is a peer's close the server missed, which would also hold up
// Shutdown.
func (s *served) expectClosed(t *testing.T, client string) {
	t.Helper()
	if open := s.waitOpen(0, 5*time.Second); open > 0 {
		t.Errorf("%s has exited, and the server still holds %d of its connections 5 s later: it missed the peer's close", client, open)
	}
}

// patternSHA256 is the SHA-256 of /download's first size bytes.
func patternSHA256(size int64) string {
	h := sha256.New()
	io.Copy(h, io.LimitReader(&pattern{ctx: context.Background()}, size))
	return hex.EncodeToString(h.Sum(nil))
}

// fileSHA256 is the SHA-256 of a file and its size.
func fileSHA256(t *testing.T, path string) (string, int64) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil)), n
}

// h2specCases is how many cases h2spec 2.2.1 runs with --strict: every
// one must pass.
const h2specCases = 146

// h2specBin returns the path of h2spec: on PATH, or where go install
// puts it (GOBIN, or GOPATH's bin), which .ci/run does not add to PATH.
func h2specBin(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("h2spec"); err == nil {
		return p
	}
	var dirs []string
	if out, err := exec.Command("go", "env", "GOBIN", "GOPATH").Output(); err == nil {
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		if lines[0] != "" {
			dirs = append(dirs, lines[0])
		}
		if len(lines) > 1 {
			for _, p := range filepath.SplitList(lines[1]) {
				dirs = append(dirs, filepath.Join(p, "bin"))
			}
		}
	}
	for _, d := range dirs {
		p := filepath.Join(d, "h2spec")
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p
		}
	}
	t.Skipf("h2spec not installed (on PATH or in %q): it has no Debian package; go install github.com/summerwind/h2spec/cmd/h2spec@v2.2.1+incompatible", dirs)
	return ""
}

// h2specReport is the part of h2spec's JUnit report (-j) the test reads.
type h2specReport struct {
	Suites []struct {
		Name    string `xml:"name,attr"`
		Package string `xml:"package,attr"` // "http2/6.5.3": with the case's index, its ID
		Cases   []struct {
			Name    string      `xml:"classname,attr"`
			Failure *h2specText `xml:"failure"`
			Error   *h2specText `xml:"error"`
			Skipped *h2specText `xml:"skipped"`
		} `xml:"testcase"`
	} `xml:"testsuite"`
}

// h2specText is an element's content, escaped as in the XML.
type h2specText struct {
	Text string `xml:",innerxml"`
}

// h2specError rewords a case's error from the report: the frames or
// events it expected, one a line, then what came instead (h2spec's
// TestError), or one line of another error.
func h2specError(text string) string {
	lines := strings.Split(strings.TrimSpace(html.UnescapeString(text)), "\n")
	if len(lines) < 2 {
		return lines[0]
	}
	return fmt.Sprintf("expected %s; got %s", strings.Join(lines[:len(lines)-1], " or "), lines[len(lines)-1])
}

// TestH2spec runs h2spec's strict conformance suite (RFC 7540 and 7541,
// and its generic cases) over h2c and over TLS: every case must pass,
// and every connection h2spec opened must be closed once it has exited.
// h2spec's report names a failing case by an ID that runs it alone.
//
// h2c runs twice: with HTTP/1.1 on the same port, as -h2c serves, and
// without, where a client that is not HTTP/2's is not answered as
// HTTP/1.1's.
func TestH2spec(t *testing.T) {
	bin := h2specBin(t)
	h2cOnly := new(http.Protocols)
	h2cOnly.SetUnencryptedHTTP2(true)
	for _, m := range []struct {
		name    string
		secure  bool
		protos  *http.Protocols
		runFlag string // the example's flag that serves so, if any
		http1   bool   // HTTP/1.1 is served on the plain port too
	}{
		{"h2c", false, h2cProtocols(), "-h2c", true},
		{"h2c-only", false, h2cOnly, "", false},
		{"TLS", true, nil, "-tls-self-signed", false},
	} {
		t.Run(m.name, func(t *testing.T) {
			// The runs wait on h2spec's timeouts more than on the CPU.
			t.Parallel()
			s := serveSiteWith(t, m.secure, m.protos)
			_, port, _ := net.SplitHostPort(s.addr)
			flags := []string{"--strict"}
			if m.secure {
				flags = append(flags, "-t", "-k")
			}
			report := filepath.Join(t.TempDir(), "h2spec.xml")
			ctx, cancel := context.WithTimeout(context.Background(), 4*timeout)
			defer cancel()
			start := time.Now()
			cmd := exec.CommandContext(ctx, bin, append(slices.Clone(flags), "-h", "127.0.0.1", "-p", port, "-j", report)...)
			out, runErr := cmd.CombinedOutput()
			took := time.Since(start)
			b, err := os.ReadFile(report)
			if err != nil {
				t.Fatalf("h2spec %v after %v, and no report: %v\n%s", runErr, took, err, out)
			}
			var r h2specReport
			if err := xml.Unmarshal(b, &r); err != nil {
				t.Fatalf("h2spec's report: %v\n%s", err, b)
			}
			total, passed, documented := 0, 0, 0
			var failed, ids []string
			for _, suite := range r.Suites {
				for i, c := range suite.Cases {
					total++
					id := fmt.Sprintf("%s/%d", suite.Package, i+1)
					ids = append(ids, id)
					switch {
					case m.http1 && id == "http2/3.5/2" && (c.Failure != nil && strings.Contains(html.UnescapeString(c.Failure.Text), "looked like an HTTP/1.1 header") ||
						c.Error != nil && strings.Contains(h2specError(c.Error.Text), "looked like an HTTP/1.1 header")):
						// "INVALID CONNECTION PREFACE" is an HTTP/1.1 request
						// line on a port that serves HTTP/1.1 too: answered
						// 400, as net/http answers it (h2spec wants the
						// connection closed without a byte).
						documented++
					case c.Failure != nil:
						failed = append(failed, fmt.Sprintf("%s (%s: %s) failed: %s", id, suite.Name, c.Name, html.UnescapeString(c.Failure.Text)))
					case c.Error != nil:
						failed = append(failed, fmt.Sprintf("%s (%s: %s): %s", id, suite.Name, c.Name, h2specError(c.Error.Text)))
					case c.Skipped != nil:
						failed = append(failed, fmt.Sprintf("%s (%s: %s) skipped", id, suite.Name, c.Name))
					default:
						passed++
					}
				}
			}
			note := ""
			if documented > 0 {
				note = ", and 3.5/2 answered as HTTP/1.1, as documented"
			}
			t.Logf("h2spec %s over %s: %d of %d cases passed in %v%s", strings.Join(flags, " "), m.name, passed, total, took.Round(time.Millisecond), note)
			for _, f := range failed {
				t.Error(f)
			}
			alone := func(id string) string {
				cmd := fmt.Sprintf("h2spec %s -p 8080 %s", strings.Join(flags, " "), id)
				if m.runFlag == "" {
					return fmt.Sprintf("%s against a server whose Protocols are UnencryptedHTTP2 alone (the example has no flag for it)", cmd)
				}
				return fmt.Sprintf("go run ./examples/httpd %s -addr 127.0.0.1:8080 & %s", m.runFlag, cmd)
			}
			if len(failed) > 0 {
				id, _, _ := strings.Cut(failed[0], " ")
				// h2spec's own account adds the requirement each case
				// checks.
				_, account, _ := strings.Cut(string(out), "\nFailures:")
				t.Errorf("h2spec's account of the failures:%s\nto run a case alone: %s", account, alone(id))
			}
			if stuck := s.waitOpen(0, 5*time.Second); stuck > 0 {
				// Which cases: each alone, watching the count.
				open := stuck
				var leaky []string
				for _, id := range ids {
					exec.CommandContext(ctx, bin, append(slices.Clone(flags), "-h", "127.0.0.1", "-p", port, id)...).Run()
					if now := s.waitOpen(open, 500*time.Millisecond); now > open {
						leaky = append(leaky, id)
						open = now
					}
				}
				msg := fmt.Sprintf("h2spec has exited, and the server still holds %d of its connections 5 s later: it missed their peer's close", stuck)
				if len(leaky) > 0 {
					msg += fmt.Sprintf("; the cases that leave one open, run alone: %q (to see one: %s, then ss -tan | grep CLOSE-WAIT)", leaky, alone(leaky[0]))
				}
				t.Error(msg)
			}
			if total != h2specCases {
				t.Errorf("h2spec ran %d cases, want %d", total, h2specCases)
			}
			if runErr != nil && len(failed) == 0 && documented == 0 {
				t.Errorf("h2spec: %v, with no case failed:\n%s", runErr, out)
			}
		})
	}
}

// TestCurlH2 runs the program (with -h2c, or -tls-self-signed) and
// fetches with curl over HTTP/2: by ALPN over TLS, trusting the CA file
// the program wrote, and with prior knowledge on the plain port. Every
// answer must be HTTP/2, bodies checked: JSON, the page, a 5 MiB echo, a
// 16 MiB download, an upload and a stream.
func TestCurlH2(t *testing.T) {
	need(t, "curl", "curl")
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			var base string
			var opts []string
			if m.secure {
				caFile := filepath.Join(t.TempDir(), "ca.pem")
				addr, out, _, _ := startRun(t, "-tls-self-signed", "-tls-cacert-out", caFile)
				if !strings.Contains(out.String(), "over HTTP/2 (h2) and HTTP/1.1, by ALPN") {
					t.Errorf("the output does not say HTTP/2 is served:\n%s", out)
				}
				_, port, _ := net.SplitHostPort(addr)
				base = "https://localhost:" + port
				opts = []string{"--http2", "--cacert", caFile, "--resolve", "localhost:" + port + ":127.0.0.1"}
			} else {
				addr, out, _, _ := startRun(t, "-h2c")
				if !strings.Contains(out.String(), "over HTTP/1.1 and HTTP/2 with prior knowledge (h2c)") {
					t.Errorf("the output does not say h2c is served:\n%s", out)
				}
				base = "http://" + addr
				opts = []string{"--http2-prior-knowledge"}
			}
			curl := func(args ...string) (string, string) {
				t.Helper()
				return tool(t, "curl", append(append([]string{"-sS", "--max-time", "60"}, opts...), args...)...)
			}

			t.Run("JSON and page", func(t *testing.T) {
				out, errOut := curl("-v", "-w", "\n%{http_version}", base+"/api/time")
				body, version, _ := strings.Cut(out, "\n\n")
				var tr timeReply
				if err := json.Unmarshal([]byte(body), &tr); err != nil || tr.Proto != "HTTP/2.0" || version != "2" {
					t.Errorf("/api/time: %q (http_version %q): %v; want proto HTTP/2.0", body, version, err)
				}
				if !strings.Contains(errOut, "< HTTP/2 200") {
					t.Errorf("curl -v shows no HTTP/2 200:\n%s", errOut)
				}
				if m.secure && (!strings.Contains(errOut, "ALPN: server accepted h2") || !strings.Contains(errOut, "SSL certificate verify ok")) {
					t.Errorf("curl -v: no h2 by ALPN with a verified certificate:\n%s", errOut)
				}
				if page, _ := curl(base + "/"); !strings.Contains(page, `<strong id="page-proto">HTTP/2.0</strong>`) {
					t.Errorf("the page does not say HTTP/2.0:\n%s", page)
				}
			})

			if m.secure {
				// curl 7.88 (Debian 12's) fails to reuse a connection
				// made with --http2-prior-knowledge ("Error in the HTTP2
				// framing layer" on the second URL, against net/http's
				// server too): the reuse is checked over TLS only.
				t.Run("one connection", func(t *testing.T) {
					out, _ := curl("-o", "/dev/null", "-o", "/dev/null", "-o", "/dev/null", "-o", "/dev/null",
						"-w", "%{http_code} %{http_version} %{num_connects}\n",
						base+"/plaintext", base+"/json", base+"/api/time", base+"/static/style.css")
					if out != "200 2 1\n200 2 0\n200 2 0\n200 2 0\n" {
						t.Errorf("status, version and new connections per URL (want one connection):\n%s", out)
					}
				})
			}

			t.Run("echo 5 MiB", func(t *testing.T) {
				path, sum := writeRandom(t, 5<<20)
				// Were curl to send Expect: 100-continue and the server
				// not answer it, --expect100-timeout 10 would show in
				// the time.
				out, _ := curl("--expect100-timeout", "10", "--data-binary", "@"+path,
					"-H", "Content-Type: application/octet-stream", "-w", "\n%{http_version} %{time_total}", base+"/api/echo")
				body, tail, _ := strings.Cut(out, "\n\n")
				var er echoReply
				if err := json.Unmarshal([]byte(body), &er); err != nil || er.Length != 5<<20 || er.SHA256 != sum {
					t.Errorf("echo: %+v %v, want length %d sha256 %s", er, err, 5<<20, sum)
				}
				var version string
				var secs float64
				if _, err := fmt.Sscan(tail, &version, &secs); err != nil || version != "2" || secs >= 5 {
					t.Errorf("echo: http_version and time %q (%v): want 2, under 5 s", tail, err)
				}
			})

			t.Run("upload -T", func(t *testing.T) {
				path, _ := writeRandom(t, 3<<20+17)
				out, _ := curl("-T", path, "-w", "%{http_version}", base+"/upload")
				if want := fmt.Sprintf(`{"bytes":%d}`+"\n2", 3<<20+17); out != want {
					t.Errorf("curl -T: %q, want %q", out, want)
				}
			})

			t.Run("download 16 MiB", func(t *testing.T) {
				const size = 16 << 20
				path := filepath.Join(t.TempDir(), "dl.bin")
				out, _ := curl("-o", path, "-w", "%{http_version} %{size_download}", fmt.Sprintf("%s/download?size=%d", base, size))
				if want := fmt.Sprintf("2 %d", size); out != want {
					t.Errorf("http_version and size_download %q, want %q", out, want)
				}
				if sum, n := fileSHA256(t, path); n != size || sum != patternSHA256(size) {
					t.Errorf("downloaded %d bytes with sha256 %s; want %d with %s", n, sum, size, patternSHA256(size))
				}
			})

			t.Run("stream", func(t *testing.T) {
				// The first event comes at once, the fifth 400 ms later:
				// only DATA frames sent as each event is flushed arrive
				// so.
				out, _ := curl("-N", "-o", "/dev/null", "-w", "%{http_version} %{time_starttransfer} %{time_total}", base+"/stream?n=5")
				var version string
				var first, total float64
				if _, err := fmt.Sscan(out, &version, &first, &total); err != nil || version != "2" || total-first < 0.3 {
					t.Errorf("stream: %q (%v): want HTTP/2, its first byte 0.4 s before the end", out, err)
				}
			})

			if !m.secure {
				t.Run("HTTP/1.1 on the same port", func(t *testing.T) {
					// -h2c adds HTTP/2: a client without prior knowledge
					// still gets HTTP/1.1, and one asking for "Upgrade:
					// h2c" too (the upgrade is not supported).
					for _, flag := range []string{"--http1.1", "--http2"} {
						out, errOut := tool(t, "curl", "-sS", "-v", flag, "-w", "\n%{http_version}", base+"/api/time")
						body, version, _ := strings.Cut(out, "\n\n")
						var tr timeReply
						if err := json.Unmarshal([]byte(body), &tr); err != nil || tr.Proto != "HTTP/1.1" || version != "1.1" {
							t.Errorf("curl %s: %q (http_version %q): %v; want HTTP/1.1", flag, body, version, err)
						}
						if flag == "--http2" && !strings.Contains(errOut, "> Upgrade: h2c") {
							t.Errorf("curl --http2 did not ask for the upgrade:\n%s", errOut)
						}
					}
				})
			}
		})
	}
}

// nghttpStats matches a row of nghttp -s's table: id, responseEnd,
// requestStart, process, code, size, path.
var nghttpStats = regexp.MustCompile(`(?m)^\s*\d+\s+\S+\s+\S+\s+\S+\s+(\d{3})\s+\S+\s+(\S+)$`)

// nghttpCodes returns "code path" for every row of nghttp -s's table.
func nghttpCodes(out string) []string {
	var rows []string
	for _, m := range nghttpStats.FindAllStringSubmatch(out, -1) {
		rows = append(rows, m[1]+" "+m[2])
	}
	slices.Sort(rows)
	return rows
}

// TestNghttp drives the site with nghttp2's client over h2c (prior
// knowledge, nghttp's default for http://) and TLS: many streams at once
// on its one connection, the page with its assets (-a), an upload and a
// 16 MiB download through nghttp's 64 KiB windows.
func TestNghttp(t *testing.T) {
	need(t, "nghttp", "nghttp2-client")
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			s := serveH2(t, m.secure)
			// nghttp does not verify certificates (it warns); an IP
			// address spares it localhost's ::1.
			base := "http://" + s.addr
			if m.secure {
				base = "https://" + s.addr
			}

			t.Run("multiplexed", func(t *testing.T) {
				// -m 8: each URI 8 times, 32 streams opened at once.
				paths := []string{"/plaintext", "/json", "/api/time", "/stream?n=3"}
				args := []string{"-nvs", "-m", "8"}
				for _, p := range paths {
					args = append(args, base+p)
				}
				out, _ := tool(t, "nghttp", args...)
				var want []string
				for _, p := range paths {
					for range 8 {
						want = append(want, "200 "+p)
					}
				}
				slices.Sort(want)
				if got := nghttpCodes(out); !slices.Equal(got, want) {
					t.Errorf("nghttp -m 8: got %q, want %q\n%s", got, want, out)
				}
				if m.secure && !strings.Contains(out, "The negotiated protocol: h2") {
					t.Errorf("nghttp did not negotiate h2:\n%s", out)
				}
				for _, bad := range []string{"recv RST_STREAM", "recv GOAWAY"} {
					if strings.Contains(out, bad) {
						t.Errorf("nghttp got %s:\n%s", bad, out)
					}
				}
			})

			t.Run("page and assets", func(t *testing.T) {
				out, _ := tool(t, "nghttp", "-nas", base+"/")
				want := []string{"200 /", "200 /static/app.js", "200 /static/logo.svg", "200 /static/style.css"}
				if got := nghttpCodes(out); !slices.Equal(got, want) {
					t.Errorf("nghttp -a: got %q, want %q\n%s", got, want, out)
				}
			})

			t.Run("upload", func(t *testing.T) {
				path, sum := writeRandom(t, 3<<20)
				out, _ := tool(t, "nghttp", "-d", path, base+"/api/echo")
				var er echoReply
				if err := json.Unmarshal([]byte(out), &er); err != nil || er.Length != 3<<20 || er.SHA256 != sum {
					t.Errorf("nghttp -d: %q %v, want length %d sha256 %s", out, err, 3<<20, sum)
				}
			})

			t.Run("download 16 MiB", func(t *testing.T) {
				const size = 16 << 20
				out, _ := tool(t, "nghttp", fmt.Sprintf("%s/download?size=%d", base, size))
				sum := sha256.Sum256([]byte(out))
				if len(out) != size || hex.EncodeToString(sum[:]) != patternSHA256(size) {
					t.Errorf("nghttp download: %d bytes, sha256 %x; want %d bytes of the pattern", len(out), sum, size)
				}
			})
			s.expectClosed(t, "nghttp")

			t.Run("gone while flow-blocked", func(t *testing.T) {
				// -w 0: a stream window of 0, so the downloads' DATA
				// waits for a WINDOW_UPDATE that never comes; then the
				// client dies. The server must see the connection end,
				// close it and end the handlers (whose Writes fail), 32
				// of them at once.
				const streams = 32
				cmd := exec.Command("nghttp", "-n", "-w", "0", "-m", strconv.Itoa(streams), base+"/download?size=1048576")
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				defer cmd.Wait()
				defer cmd.Process.Kill()
				for deadline := time.Now().Add(timeout); s.log.running() < streams; time.Sleep(5 * time.Millisecond) {
					if time.Now().After(deadline) {
						t.Fatalf("%d of nghttp's %d requests reached their handlers within %v", s.log.running(), streams, timeout)
					}
				}
				// Let the handler fill what it may and block.
				time.Sleep(100 * time.Millisecond)
				cmd.Process.Kill()
				cmd.Wait()
				s.expectClosed(t, "nghttp -w 0, killed")
				for deadline := time.Now().Add(5 * time.Second); s.log.running() > 0; time.Sleep(5 * time.Millisecond) {
					if time.Now().After(deadline) {
						t.Fatalf("%d /download handlers have not returned 5 s after their client died", s.log.running())
					}
				}
			})
		})
	}
}

// TestH2loadH2 runs h2load over HTTP/2, 10 connections of 10 concurrent
// streams each: every request must succeed. A second run uploads, so
// that request bodies of many streams share the connection's window.
// -N 5 ends a connection on which nothing has come for 5 s: a response
// that never comes shows as a timeout in h2load's counts, instead of a
// run killed without them.
func TestH2loadH2(t *testing.T) {
	need(t, "h2load", "nghttp2-client")
	upload, _ := writeRandom(t, 16<<10)
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			s := serveH2(t, m.secure)
			base, proto := "http://"+s.addr, "Application protocol: h2c"
			if m.secure {
				base, proto = "https://"+s.addr, "Application protocol: h2\n"
			}
			for _, run := range []struct {
				n    int
				args []string
			}{
				{20000, []string{"-N5", "-c10", "-m10", "-n20000", base + "/plaintext"}},
				{2000, []string{"-N5", "-c4", "-m8", "-n2000", "-d", upload, base + "/upload"}},
			} {
				out, _ := tool(t, "h2load", run.args...)
				want := fmt.Sprintf("requests: %d total, %d started, %d done, %d succeeded, 0 failed, 0 errored, 0 timeout", run.n, run.n, run.n, run.n)
				codes := fmt.Sprintf("status codes: %d 2xx, 0 3xx, 0 4xx, 0 5xx", run.n)
				if !strings.Contains(out, want) || !strings.Contains(out, codes) || !strings.Contains(out, proto) {
					t.Errorf("h2load %q:\n%s", run.args, out)
				}
				if i := strings.Index(out, "finished in"); i >= 0 {
					line, _, _ := strings.Cut(out[i:], "\n")
					t.Logf("h2load %s: %s", strings.Join(run.args[:len(run.args)-1], " "), line)
				}
			}
			s.expectClosed(t, "h2load")
		})
	}
}

// h2Client is a Go client that speaks HTTP/2 to s: by ALPN over TLS,
// trusting s's CA, or with prior knowledge on plain TCP.
func (s *served) h2Client() *http.Client {
	var roots *x509.CertPool
	if s.ca != nil {
		roots = s.ca.Pool()
	}
	return newH2Client(s.addr, roots)
}

// newH2Client is a Go client that speaks HTTP/2 to addr, whatever the
// URL's host: over TLS trusting roots alone, by ALPN, or if roots is nil
// with prior knowledge on plain TCP.
func newH2Client(addr string, roots *x509.CertPool) *http.Client {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "tcp", addr)
		},
		// With DialContext set, the Transport tries h2 only when told.
		ForceAttemptHTTP2: true,
	}
	if roots != nil {
		tr.TLSClientConfig = &tls.Config{RootCAs: roots}
	} else {
		p := new(http.Protocols)
		p.SetUnencryptedHTTP2(true)
		tr.Protocols = p
	}
	return &http.Client{Transport: tr, Timeout: timeout}
}

// TestGoClientH2 uses net/http's HTTP/2 client over TLS and h2c: many
// requests at once share one connection, overlapping in time; a stream's
// events arrive one by one as flushed; uploads of known and unknown
// length and a 16 MiB download come through whole.
func TestGoClientH2(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			s := serveH2(t, m.secure)
			c := s.h2Client()
			var mu sync.Mutex
			conns := map[string]int{} // local address: requests sent on it
			trace := &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) {
				mu.Lock()
				conns[info.Conn.LocalAddr().String()]++
				mu.Unlock()
			}}
			do := func(method, path string, body io.Reader) (*http.Response, error) {
				req, err := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), method, s.base+path, body)
				if err != nil {
					return nil, err
				}
				resp, err := c.Do(req)
				if err == nil && resp.Proto != "HTTP/2.0" {
					resp.Body.Close()
					return nil, fmt.Errorf("%s %s: served as %s", method, path, resp.Proto)
				}
				return resp, err
			}
			// The first request makes the connection; the rest find it.
			resp, err := do("GET", "/api/time", nil)
			if err != nil {
				t.Fatal(err)
			}
			var tr timeReply
			err = json.NewDecoder(resp.Body).Decode(&tr)
			resp.Body.Close()
			if err != nil || tr.Proto != "HTTP/2.0" {
				t.Fatalf("/api/time: %+v %v", tr, err)
			}
			if m.secure && (resp.TLS == nil || resp.TLS.NegotiatedProtocol != "h2") {
				t.Errorf("TLS %+v: want h2 by ALPN", resp.TLS)
			}

			t.Run("concurrent", func(t *testing.T) {
				const workers, each = 32, 20
				errs := make(chan error, workers)
				var wg sync.WaitGroup
				for w := range workers {
					wg.Go(func() {
						for i := range each {
							body := fmt.Sprintf("worker %d request %d", w, i)
							resp, err := do("POST", "/api/echo", strings.NewReader(body))
							if err != nil {
								errs <- err
								return
							}
							var er echoReply
							err = json.NewDecoder(resp.Body).Decode(&er)
							resp.Body.Close()
							if err != nil || er.Body == nil || *er.Body != body {
								errs <- fmt.Errorf("echo of %q: %+v %v", body, er, err)
								return
							}
						}
					})
				}
				wg.Wait()
				close(errs)
				for err := range errs {
					t.Error(err)
				}

				// 20 streams of 300 ms each: on one connection they
				// take about 300 ms together, one after another 6 s.
				const streams = 20
				start := time.Now()
				for range streams {
					wg.Go(func() {
						resp, err := do("GET", "/stream?n=4", nil)
						if err != nil {
							t.Error(err)
							return
						}
						b, err := io.ReadAll(resp.Body)
						resp.Body.Close()
						if n := bytes.Count(b, []byte("data: ")); err != nil || n != 4 {
							t.Errorf("/stream?n=4: %d events, %v", n, err)
						}
					})
				}
				wg.Wait()
				took := time.Since(start)
				t.Logf("%d streams of 300 ms at once: %v", streams, took.Round(time.Millisecond))
				if took > 3*time.Second {
					t.Errorf("%d streams of 300 ms took %v: not served concurrently", streams, took)
				}
				mu.Lock()
				defer mu.Unlock()
				if len(conns) != 1 {
					t.Errorf("requests per connection %v: want one connection", conns)
				}
			})

			t.Run("stream flushed", func(t *testing.T) {
				resp, err := do("GET", "/stream?n=5", nil)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				checkFlushedStream(t, resp, 5)
			})

			t.Run("upload", func(t *testing.T) {
				body, sum := randomBytes(t, 5<<20)
				for _, known := range []bool{true, false} {
					var r io.Reader = bytes.NewReader(body)
					if !known {
						r = io.MultiReader(r) // hides the length: no content-length, DATA frames to END_STREAM
					}
					resp, err := do("POST", "/api/echo", r)
					if err != nil {
						t.Fatal(err)
					}
					var er echoReply
					err = json.NewDecoder(resp.Body).Decode(&er)
					resp.Body.Close()
					if err != nil || er.Length != int64(len(body)) || er.SHA256 != sum {
						t.Errorf("length known %v: echo %+v %v, want %d bytes with sha256 %s", known, er, err, len(body), sum)
					}
				}
			})

			t.Run("download 16 MiB", func(t *testing.T) {
				const size = 16 << 20
				resp, err := do("GET", "/download?size="+strconv.Itoa(size), nil)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				if resp.ContentLength != size {
					t.Errorf("Content-Length %d, want %d", resp.ContentLength, size)
				}
				if n, err := checkPattern(resp.Body); err != nil || n != size {
					t.Errorf("read %d bytes: %v", n, err)
				}
			})
		})
	}
}

// TestRunShutdownH2 is TestRunShutdown's clean case over HTTP/2: four
// downloads in progress on one connection when the signal comes finish,
// though most of each is still to be sent then, on WINDOW_UPDATEs that
// the server must keep reading while it shuts down.
func TestRunShutdownH2(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			args := []string{"-h2c"}
			caFile := filepath.Join(t.TempDir(), "ca.pem")
			if m.secure {
				args = []string{"-tls-self-signed", "-tls-cacert-out", caFile}
			}
			addr, out, stop, wait := startRun(t, append(args, "-shutdown-timeout", "10s")...)
			var roots *x509.CertPool
			url := "http://" + addr
			if m.secure {
				var err error
				if roots, err = selfsigned.LoadPool(caFile); err != nil {
					t.Fatal(err)
				}
				_, port, _ := net.SplitHostPort(addr)
				url = "https://localhost:" + port
			}
			c := newH2Client(addr, roots)
			// 32 MiB each: several times Go's client's stream window
			// (4 MiB) and the sockets' buffers.
			const downloads, size = 4, 32 << 20
			var bodies []io.Reader
			for range downloads {
				resp, err := c.Get(fmt.Sprintf("%s/download?size=%d", url, size))
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				if resp.Proto != "HTTP/2.0" {
					t.Fatalf("served as %s", resp.Proto)
				}
				first := make([]byte, 1<<10)
				if _, err := io.ReadFull(resp.Body, first); err != nil {
					t.Fatal(err)
				}
				bodies = append(bodies, io.MultiReader(bytes.NewReader(first), resp.Body))
			}
			stop()
			time.Sleep(100 * time.Millisecond)
			var wg sync.WaitGroup
			for i, body := range bodies {
				wg.Go(func() {
					if n, err := checkPattern(body); err != nil || n != size {
						t.Errorf("download %d, in progress at shutdown: %d bytes, %v; want all %d", i, n, err, size)
					}
				})
			}
			wg.Wait()
			if err := wait(); err != nil {
				t.Fatalf("run: %v", err)
			}
			if !strings.Contains(out.String(), "shut down cleanly") {
				t.Errorf("output lacks the clean shutdown:\n%s", out)
			}
		})
	}
}

// TestChromiumH2 loads the page over TLS in headless Chromium, which
// takes h2 by ALPN: every request it made must have been served as
// HTTP/2.0 (the server's record), and the page must say so for itself
// and for the script's fetch.
func TestChromiumH2(t *testing.T) {
	s := serveSite(t, true)
	run := chromium(t, s)
	dom, stderr := run("--dump-dom")
	checkDOM(t, dom, stderr, "HTTP/2.0")
	reqs := s.log.withProto()
	t.Logf("requests the server answered: %q", reqs)
	for _, want := range []string{"GET / 200", "GET /static/style.css 200", "GET /static/app.js 200", "GET /static/logo.svg 200", "GET /api/time 200"} {
		if !slices.Contains(reqs, "HTTP/2.0 "+want) {
			t.Errorf("no %q over HTTP/2.0 among the requests", want)
		}
	}
	for _, r := range reqs {
		if !strings.HasPrefix(r, "HTTP/2.0 ") || !strings.HasSuffix(r, " 200") {
			t.Errorf("request not served as HTTP/2.0 with 200: %s", r)
		}
	}
	s.expectClosed(t, "chromium")
}
