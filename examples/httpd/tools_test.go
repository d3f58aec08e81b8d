//go:build linux

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// need skips the test unless the command is installed.
func need(t *testing.T, cmd, pkg string) {
	t.Helper()
	if _, err := exec.LookPath(cmd); err != nil {
		t.Skipf("%s not installed: apt-get install %s (%v)", cmd, pkg, err)
	}
}

// tool runs a command for at most timeout and returns its stdout and
// stderr, failing the test if it does not exit 0.
func tool(t *testing.T, name string, args ...string) (stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %q: %v\nstdout:\n%s\nstderr:\n%s", name, args, err, o.String(), e.String())
	}
	return o.String(), e.String()
}

// writeRandom writes n random bytes to a file in the test's temporary
// directory and returns its path and SHA-256.
func writeRandom(t *testing.T, n int) (string, string) {
	t.Helper()
	b, sum := randomBytes(t, n)
	path := filepath.Join(t.TempDir(), fmt.Sprintf("random-%d.bin", n))
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path, sum
}

// TestCurl drives the site with curl: HTTP/1.0, keep-alive, large and
// chunked uploads, Expect: 100-continue, and streaming.
func TestCurl(t *testing.T) {
	need(t, "curl", "curl")
	s := serveSite(t, false)
	curl := func(args ...string) (string, string) {
		t.Helper()
		return tool(t, "curl", append([]string{"-sS", "--max-time", "60"}, args...)...)
	}

	t.Run("HTTP/1.0", func(t *testing.T) {
		out, _ := curl("-0", "-w", "\n%{http_code} %{num_connects}", s.base+"/plaintext")
		if out != "Hello, World!\n200 1" {
			t.Errorf("curl -0 /plaintext: %q", out)
		}
		// Without chunked framing for 1.0, a streamed body is
		// delimited by the server's close (or a Content-Length).
		out, errOut := curl("-0", "-v", "-N", s.base+"/stream?n=3")
		if got := strings.Count(out, "data: line"); got != 3 {
			t.Errorf("curl -0 /stream?n=3: %d events:\n%s", got, out)
		}
		if strings.Contains(errOut, "left intact") {
			t.Errorf("curl -0: the connection was kept open after a close-delimited or 1.0 response:\n%s", errOut)
		}
	})

	t.Run("keep-alive", func(t *testing.T) {
		// Four URLs in one curl: the first connects, the rest reuse it.
		out, errOut := curl("-v", "-o", "/dev/null", "-o", "/dev/null", "-o", "/dev/null", "-o", "/dev/null",
			"-w", "%{http_code} %{num_connects}\n",
			s.base+"/plaintext", s.base+"/json", s.base+"/api/time", s.base+"/static/style.css")
		if out != "200 1\n200 0\n200 0\n200 0\n" {
			t.Errorf("num_connects per URL (want 1 then 0s):\n%s", out)
		}
		if n := strings.Count(errOut, "Re-using existing connection") + strings.Count(errOut, "Reusing existing"); n != 3 {
			t.Errorf("curl reused the connection %d times, want 3:\n%s", n, errOut)
		}
	})

	t.Run("echo 20 MiB", func(t *testing.T) {
		path, sum := writeRandom(t, 20<<20)
		// curl sends Expect: 100-continue for a body this large; with
		// --expect100-timeout 10 a server that never answered 100 would
		// cost 10 s, which the time check catches.
		out, errOut := curl("-v", "--expect100-timeout", "10", "--data-binary", "@"+path,
			"-H", "Content-Type: application/octet-stream", "-w", "\n%{time_total}", s.base+"/api/echo")
		body, total, _ := strings.Cut(out, "\n\n")
		var er echoReply
		if err := json.Unmarshal([]byte(body), &er); err != nil || er.Length != 20<<20 || er.SHA256 != sum || er.Body != nil {
			t.Errorf("echo: %+v %v, want length %d sha256 %s", er, err, 20<<20, sum)
		}
		if !strings.Contains(errOut, "> Expect: 100-continue") || !strings.Contains(errOut, "< HTTP/1.1 100 Continue") {
			t.Errorf("no Expect: 100-continue exchange:\n%s", errOut)
		}
		if strings.Contains(errOut, "Done waiting for 100-continue") {
			t.Errorf("curl gave up waiting for 100 Continue:\n%s", errOut)
		}
		if secs, err := strconv.ParseFloat(strings.TrimSpace(total), 64); err != nil || secs >= 5 {
			t.Errorf("the echo took %q s", total)
		}
	})

	t.Run("100-continue small", func(t *testing.T) {
		// A small body with Expect asked for explicitly: curl waits for
		// 100 Continue before sending it (up to its 1 s default).
		start := time.Now()
		out, errOut := curl("-v", "-H", "Expect: 100-continue", "--data-binary", "0123456789", s.base+"/upload")
		if out != `{"bytes":10}`+"\n" || !strings.Contains(errOut, "< HTTP/1.1 100 Continue") {
			t.Errorf("upload with Expect: %q\n%s", out, errOut)
		}
		if took := time.Since(start); took >= time.Second {
			t.Errorf("upload with Expect took %v: curl's 1 s fallback, not the server's 100 Continue", took)
		}
	})

	t.Run("upload -T", func(t *testing.T) {
		path, _ := writeRandom(t, 3<<20+17)
		out, _ := curl("-T", path, s.base+"/upload")
		if want := fmt.Sprintf(`{"bytes":%d}`+"\n", 3<<20+17); out != want {
			t.Errorf("curl -T: %q, want %q", out, want)
		}
	})

	t.Run("chunked upload", func(t *testing.T) {
		path, sum := writeRandom(t, 5<<20+3)
		out, errOut := curl("-v", "-H", "Transfer-Encoding: chunked", "--data-binary", "@"+path, s.base+"/api/echo")
		var er echoReply
		if err := json.Unmarshal([]byte(out), &er); err != nil || er.Length != 5<<20+3 || er.SHA256 != sum {
			t.Errorf("chunked echo: %+v %v, want sha256 %s", er, err, sum)
		}
		if !strings.Contains(errOut, "> Transfer-Encoding: chunked") {
			t.Errorf("curl did not send chunked:\n%s", errOut)
		}
		out, _ = curl("-T", "-", s.base+"/upload") // stdin: chunked, empty
		if out != `{"bytes":0}`+"\n" {
			t.Errorf("curl -T - with an empty stdin: %q", out)
		}
	})

	t.Run("stream", func(t *testing.T) {
		// The first event comes at once, the fifth 400 ms later: only a
		// flushed response arrives so.
		out, _ := curl("-N", "-o", "/dev/null", "-w", "%{time_starttransfer} %{time_total}", s.base+"/stream?n=5")
		var first, total float64
		if _, err := fmt.Sscan(out, &first, &total); err != nil || total-first < 0.3 {
			t.Errorf("stream: first byte at %v s, end at %v s: not flushed as it went (%q %v)", first, total, out, err)
		}
	})

	t.Run("download", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "dl.bin")
		out, _ := curl("-o", path, "-w", "%{size_download}", s.base+"/download?size=10000000")
		if out != "10000000" {
			t.Errorf("size_download %q", out)
		}
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if n, err := checkPattern(f); n != 10000000 || err != nil {
			t.Errorf("downloaded file: %d bytes, %v", n, err)
		}
	})
}

// TestCurlTLS runs the program with -tls-self-signed and fetches over
// HTTP/1.1 and TLS 1.3 with curl trusting the CA file it wrote.
func TestCurlTLS(t *testing.T) {
	need(t, "curl", "curl")
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	addr, out, _, _ := startRun(t, "-tls-self-signed", "-tls-cacert-out", caFile)
	_, port, _ := strings.Cut(addr, ":")
	if !strings.Contains(out.String(), "CA certificate written to "+caFile) {
		t.Errorf("output does not name the CA file:\n%s", out)
	}
	body, errOut := tool(t, "curl", "-sS", "-v", "--http1.1", "--tlsv1.3", "--cacert", caFile,
		"--resolve", "localhost:"+port+":127.0.0.1", "-w", "\n%{ssl_verify_result} %{http_version}",
		"https://localhost:"+port+"/json")
	if body != `{"message":"Hello, World!"}`+"\n\n0 1.1" {
		t.Errorf("curl over TLS: %q", body)
	}
	for _, want := range []string{"SSL connection using TLSv1.3", "ALPN: server accepted http/1.1", "SSL certificate verify ok"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("curl -v lacks %q:\n%s", want, errOut)
		}
	}
	// Without the CA, curl refuses the certificate (exit 60).
	cmd := exec.Command("curl", "-sS", "--resolve", "localhost:"+port+":127.0.0.1", "https://localhost:"+port+"/json")
	if err := cmd.Run(); err == nil {
		t.Errorf("curl without --cacert accepted the certificate")
	} else if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 60 {
		t.Errorf("curl without --cacert: %v, want exit 60", err)
	}
}

// TestWrk runs wrk for a second on each benchmark route: every response
// 2xx, no socket error of any kind.
func TestWrk(t *testing.T) {
	need(t, "wrk", "wrk")
	s := serveSite(t, false)
	for _, path := range []string{"/plaintext", "/json"} {
		out, _ := tool(t, "wrk", "-t1", "-c16", "-d1s", s.base+path)
		t.Logf("wrk %s:\n%s", path, out)
		if strings.Contains(out, "Non-2xx") || strings.Contains(out, "Socket errors") {
			t.Errorf("wrk %s: errors:\n%s", path, out)
		}
		m := regexp.MustCompile(`(\d+) requests in`).FindStringSubmatch(out)
		if m == nil || m[1] == "0" {
			t.Errorf("wrk %s: no requests completed:\n%s", path, out)
		}
	}
}

// TestH2loadH1 runs h2load in HTTP/1.1 mode, one request at a time per
// connection and then 8 pipelined: every request must succeed.
func TestH2loadH1(t *testing.T) {
	need(t, "h2load", "nghttp2-client")
	s := serveSite(t, false)
	for _, m := range []string{"1", "8"} {
		out, _ := tool(t, "h2load", "--h1", "-n", "4000", "-c", "16", "-m", m, s.base+"/plaintext")
		want := "requests: 4000 total, 4000 started, 4000 done, 4000 succeeded, 0 failed, 0 errored, 0 timeout"
		if !strings.Contains(out, want) || !strings.Contains(out, "status codes: 4000 2xx") {
			t.Errorf("h2load --h1 -m %s:\n%s", m, out)
		}
	}
}

// TestAB runs ApacheBench with keep-alive: no failed request, every one
// kept alive.
func TestAB(t *testing.T) {
	need(t, "ab", "apache2-utils")
	s := serveSite(t, false)
	out, _ := tool(t, "ab", "-q", "-k", "-n", "4000", "-c", "16", s.base+"/json")
	for _, want := range []string{"Complete requests:      4000", "Failed requests:        0", "Keep-Alive requests:    4000"} {
		if !strings.Contains(out, want) {
			t.Errorf("ab -k lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "Non-2xx") {
		t.Errorf("ab: non-2xx responses:\n%s", out)
	}
	if !strings.Contains(out, "Document Length:        28 bytes") {
		t.Errorf("ab: /json's length is not 28:\n%s", out)
	}
}
