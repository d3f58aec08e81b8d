//go:build linux

package peers

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// h2loadTLS13Cipher is the TLS 1.3 suite h2load offers, alone: OpenSSL
// servers (nghttpd) prefer AES-256-GCM where crypto/tls picks
// AES-128-GCM, and every server of a TLS row must encrypt alike.
const h2loadTLS13Cipher = "TLS_AES_128_GCM_SHA256"

// h2loadResult is h2load's summary of one run.
type h2loadResult struct {
	proto    string        // "Application protocol:": h2c, h2 or http/1.1
	duration time.Duration // "finished in", rounded by h2load
	rps      float64       // h2load's own req/s, from its exact duration
	// The "requests:" line.
	total, started, done, succeeded, failed, errored, timeout int64
	status2xx                                                 int64 // of "status codes:"
	data                                                      int64 // "traffic:" body bytes (DATA payloads in HTTP/2)
	reqMean                                                   time.Duration
	cpu                                                       time.Duration // h2load's CPU time
}

// runH2load runs h2load with args (the URL last), one thread; it
// inherits this process's CPU mask, the client's CPU. TLS runs offer
// h2loadTLS13Cipher alone.
func runH2load(args ...string) (h2loadResult, error) {
	if len(args) > 0 && strings.HasPrefix(args[len(args)-1], "https:") {
		args = append([]string{"--tls13-ciphers=" + h2loadTLS13Cipher}, args...)
	}
	args = append([]string{"-t1"}, args...)
	cmd := exec.Command("h2load", args...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return h2loadResult{}, fmt.Errorf("h2load %s: %v\n%s", strings.Join(args, " "), err, tail(out, 4096))
	}
	r, err := parseH2load(string(out))
	if err != nil {
		return r, fmt.Errorf("h2load %s: %v\n%s", strings.Join(args, " "), err, tail(out, 4096))
	}
	r.cpu = cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	return r, nil
}

// tail returns the last n bytes of out: h2load's output ends with its
// summary.
func tail(out []byte, n int) []byte {
	if len(out) > n {
		return out[len(out)-n:]
	}
	return out
}

// parseH2load reads h2load's summary lines.
func parseH2load(out string) (h2loadResult, error) {
	var r h2loadResult
	seen := 0
	num := func(s string) (int64, error) { return strconv.ParseInt(strings.TrimSpace(s), 10, 64) }
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "Application protocol:"):
			r.proto = strings.TrimSpace(strings.TrimPrefix(line, "Application protocol:"))
		case strings.HasPrefix(line, "finished in "):
			// finished in 5.00s, 123456.78 req/s, 4.71MB/s
			f := strings.Split(strings.TrimPrefix(line, "finished in "), ", ")
			if len(f) < 2 {
				return r, fmt.Errorf("%q", line)
			}
			d, err := time.ParseDuration(f[0])
			if err != nil {
				return r, fmt.Errorf("%q: %v", line, err)
			}
			rps, err := strconv.ParseFloat(strings.TrimSuffix(f[1], " req/s"), 64)
			if err != nil {
				return r, fmt.Errorf("%q: %v", line, err)
			}
			r.duration, r.rps = d, rps
			seen++
		case strings.HasPrefix(line, "requests: "):
			// requests: N total, N started, N done, N succeeded, N failed, N errored, N timeout
			for part := range strings.SplitSeq(strings.TrimPrefix(line, "requests: "), ", ") {
				v, k, ok := strings.Cut(part, " ")
				n, err := num(v)
				if !ok || err != nil {
					return r, fmt.Errorf("%q", line)
				}
				switch k {
				case "total":
					r.total = n
				case "started":
					r.started = n
				case "done":
					r.done = n
				case "succeeded":
					r.succeeded = n
				case "failed":
					r.failed = n
				case "errored":
					r.errored = n
				case "timeout":
					r.timeout = n
				}
			}
			seen++
		case strings.HasPrefix(line, "status codes: "):
			v, _, _ := strings.Cut(strings.TrimPrefix(line, "status codes: "), " ")
			n, err := num(v)
			if err != nil {
				return r, fmt.Errorf("%q", line)
			}
			r.status2xx = n
			seen++
		case strings.HasPrefix(line, "traffic: "):
			// traffic: 37.89MB (39735250) total, 9.25MB (9696600) headers (space savings 93.50%), 12.01MB (12596350) data
			i := strings.LastIndex(line, "(")
			j := strings.LastIndex(line, ") data")
			if i < 0 || j < i {
				return r, fmt.Errorf("%q", line)
			}
			n, err := num(line[i+1 : j])
			if err != nil {
				return r, fmt.Errorf("%q", line)
			}
			r.data = n
			seen++
		case strings.HasPrefix(line, "time for request:"):
			f := strings.Fields(strings.TrimPrefix(line, "time for request:"))
			if len(f) >= 3 {
				if d, err := time.ParseDuration(f[2]); err == nil {
					r.reqMean = d
				}
			}
		}
	}
	if seen != 4 {
		return r, errors.New("no summary from h2load")
	}
	return r, nil
}

// check verifies h2load's counts: the protocol wanted, at least one
// request, every request done a success, none failed, errored or timed
// out, and the 2xx statuses and body bytes (each answer bodyLen long)
// those of the requests done, plus at most those of the requests still
// in flight when a timed run ended (started, not done: h2load counts a
// status when the head arrives, and body bytes as they arrive).
func (r h2loadResult) check(proto string, bodyLen int) error {
	n := int64(bodyLen)
	switch {
	case r.proto != proto:
		return fmt.Errorf("h2load negotiated %q, want %q", r.proto, proto)
	case r.done == 0:
		return errors.New("h2load completed no request")
	case r.failed != 0 || r.errored != 0 || r.timeout != 0:
		return fmt.Errorf("h2load: %d failed, %d errored, %d timed out of %d", r.failed, r.errored, r.timeout, r.done)
	case r.succeeded != r.done || r.status2xx < r.done || r.status2xx > r.started:
		return fmt.Errorf("h2load: %d done, %d succeeded, %d 2xx, %d started", r.done, r.succeeded, r.status2xx, r.started)
	case r.data < r.done*n || r.data > r.started*n:
		return fmt.Errorf("h2load read %d body bytes for %d answers of %d (%d started)", r.data, r.done, bodyLen, r.started)
	}
	return nil
}

// h2Proc is a server process of the HTTP/2 benchmarks: a launcher child
// (cmd/serve) or nghttpd.
type h2Proc interface {
	Pid() int
	address() string
	stop() error
}

func (c *child) address() string { return c.addr }

// extProc is a server that is not Go (nghttpd), in a process of its own.
type extProc struct {
	cmd    *exec.Cmd
	addr   string
	stderr *capped
	done   chan struct{} // closed once Wait has returned
	err    error         // Wait's result, valid after done
}

func (p *extProc) Pid() int        { return p.cmd.Process.Pid }
func (p *extProc) address() string { return p.addr }

// stop sends SIGTERM and waits up to 10 s, then kills. Ended by the
// SIGTERM is a clean exit; anything else is an error.
func (p *extProc) stop() error {
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("%s (pid %d) did not exit within 10s of SIGTERM; killed; stderr:\n%s", p.cmd.Path, p.Pid(), p.stderr)
	}
	var ee *exec.ExitError
	if errors.As(p.err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGTERM {
			return nil
		}
	}
	if p.err != nil {
		return fmt.Errorf("%s (pid %d): %v; stderr:\n%s", p.cmd.Path, p.Pid(), p.err, p.stderr)
	}
	return nil
}

// nghttpdPath is Debian's nghttpd (nghttp2-server).
const nghttpdPath = "/usr/sbin/nghttpd"

// The document root nghttpd serves, written once into the launcher's
// directory: the routes /plaintext and /json as files holding their
// bodies.
var nghttpdDocs struct {
	once sync.Once
	dir  string
	err  error
}

func nghttpdHtdocs() (string, error) {
	nghttpdDocs.once.Do(func() {
		if _, nghttpdDocs.err = buildLauncher(); nghttpdDocs.err != nil {
			return
		}
		dir := filepath.Join(launcher.dir, "htdocs")
		if nghttpdDocs.err = os.MkdirAll(dir, 0o755); nghttpdDocs.err != nil {
			return
		}
		for _, r := range []HTTPRoute{RoutePlaintext, RouteJSON} {
			if nghttpdDocs.err = os.WriteFile(filepath.Join(dir, strings.TrimPrefix(r.Path, "/")), []byte(r.Body), 0o644); nghttpdDocs.err != nil {
				return
			}
		}
		nghttpdDocs.dir = dir
	})
	return nghttpdDocs.dir, nghttpdDocs.err
}

// startNghttpd starts nghttpd with one worker (-n1: its default, one
// thread serving everything) on 127.0.0.1, serving nghttpdHtdocs, h2c
// (--no-tls: HTTP/2 with prior knowledge) or with TLS the test
// certificate, pinned to cpu from its first instruction (-1: unpinned).
// nghttpd cannot listen on a port the kernel chooses and report it, so
// the port is one the kernel chose for a listener closed just before.
func startNghttpd(tb testing.TB, useTLS bool, cpu int) h2Proc {
	tb.Helper()
	if _, err := os.Stat(nghttpdPath); err != nil {
		tb.Skipf("%s is not installed (Debian: nghttp2-server): skipped", nghttpdPath)
	}
	docs, err := nghttpdHtdocs()
	if err != nil {
		tb.Fatal(err)
	}
	ln, err := listenLoopback()
	if err != nil {
		tb.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	_, port, _ := net.SplitHostPort(addr)
	args := []string{"-n1", "-a", "127.0.0.1", "-d", docs}
	if useTLS {
		_, certFile, keyFile := serverCert(tb)
		args = append(args, port, keyFile, certFile)
	} else {
		args = append(args, "--no-tls", port)
	}
	p := &extProc{cmd: exec.Command(nghttpdPath, args...), addr: addr, stderr: &capped{max: 64 << 10}, done: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = p.stderr, p.stderr
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := startOn(p.cmd, cpu); err != nil {
		tb.Fatal(err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	// Up when it accepts a connection.
	for deadline := time.Now().Add(startTimeout); ; {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			break
		}
		select {
		case <-p.done:
			tb.Fatalf("nghttpd %s exited (%v); output:\n%s", strings.Join(args, " "), p.err, p.stderr)
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			p.stop()
			tb.Fatalf("nghttpd %s did not accept within %v; output:\n%s", strings.Join(args, " "), startTimeout, p.stderr)
		}
	}
	if cpu >= 0 {
		if err := checkPinned(p.Pid(), cpu); err != nil {
			p.stop()
			tb.Fatal(err)
		}
	}
	return p
}
