//go:build linux

package main

import (
	"bytes"
	"context"
	"image/png"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gracepoll/gracepoll/internal/testkit"
)

// TestChromium loads the page over HTTP/1.1 and TLS in headless
// Chromium, trusting the example's CA, and checks what a user would see:
// every asset of the page served 200 (the server's own record of the
// requests), the script ran and filled in the time from /api/time (the
// DOM after load), and a screenshot was drawn. The server offers only
// http/1.1 by ALPN: TestChromiumH2 is the same page over HTTP/2.
func TestChromium(t *testing.T) {
	p := new(http.Protocols)
	p.SetHTTP1(true)
	s := serveSiteWith(t, true, p)
	run := chromium(t, s)

	dom, stderr := run("--dump-dom")
	checkDOM(t, dom, stderr, "HTTP/1.1")

	shot := filepath.Join(t.TempDir(), "page.png")
	run("--screenshot=" + shot)
	f, err := os.Open(shot)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	if b := img.Bounds(); b.Dx() != 1024 || b.Dy() != 768 {
		t.Errorf("screenshot is %v, want 1024x768", b)
	}
	// A blank page is one colour; the page's text and logo are not.
	colours := map[[4]uint32]bool{}
	for y := 0; y < img.Bounds().Dy(); y += 8 {
		for x := 0; x < img.Bounds().Dx(); x += 8 {
			r, g, b, a := img.At(x, y).RGBA()
			colours[[4]uint32{r, g, b, a}] = true
		}
	}
	if len(colours) < 4 {
		t.Errorf("the screenshot has %d colours: blank", len(colours))
	}

	reqs := s.log.all()
	t.Logf("requests the server answered: %q", reqs)
	for _, want := range []string{"GET / 200", "GET /static/style.css 200", "GET /static/app.js 200", "GET /static/logo.svg 200", "GET /api/time 200"} {
		if !slices.Contains(reqs, want) {
			t.Errorf("no %q among the requests", want)
		}
	}
	for _, r := range reqs {
		if !strings.HasSuffix(r, " 200") {
			t.Errorf("request answered other than 200: %s", r)
		}
	}
	for _, r := range s.log.withProto() {
		if !strings.HasPrefix(r, "HTTP/1.1 ") {
			t.Errorf("request not served over HTTP/1.1: %s", r)
		}
	}
}

// checkDOM checks the page as Chromium left it after load: the script
// filled in the time, and the page and the script's fetch name proto, as
// the server saw them.
func checkDOM(t *testing.T, dom, stderr, proto string) {
	t.Helper()
	if !strings.Contains(dom, `<p id="time" class="ok">server time `) {
		t.Errorf("the script did not fill in the time (stderr below):\n%s\n%s", dom, stderr)
	}
	for _, id := range []string{"page-proto", "api-proto"} {
		if want := `<strong id="` + id + `">` + proto + `</strong>`; !strings.Contains(dom, want) {
			t.Errorf("the page lacks %s:\n%s", want, dom)
		}
	}
	if strings.Contains(stderr, "ERR_CERT") {
		t.Errorf("certificate error:\n%s", stderr)
	}
}

// chromium returns a function that loads s's page (over TLS) in headless
// Chromium with the extra flags given (--dump-dom, --screenshot=FILE) and
// returns its stdout and stderr, failing the test if it fails.
//
// The CA is trusted the way a user would trust it, in an NSS database
// under a temporary HOME, when certutil (libnss3-tools) is installed;
// otherwise by the leaf's SPKI hash (--ignore-certificate-errors-spki-list).
func chromium(t *testing.T, s *served) func(extra ...string) (string, string) {
	t.Helper()
	bin := testkit.Chromium(t)
	dir := t.TempDir()
	home := filepath.Join(dir, "home")
	args := []string{
		"--headless", "--disable-gpu", "--no-first-run", "--no-default-browser-check",
		// The sandbox needs user namespaces, which a container or root
		// may not have; the page is our own.
		"--no-sandbox",
		"--user-data-dir=" + filepath.Join(dir, "profile"),
		// localhost may resolve to ::1 first; the server listens on
		// 127.0.0.1 only.
		"--host-resolver-rules=MAP localhost 127.0.0.1",
		"--window-size=1024,768",
		// Lets the fetch of /api/time finish before the DOM is dumped or
		// the screenshot taken.
		"--virtual-time-budget=5000",
	}
	trust := "an NSS database (certutil)"
	if _, err := exec.LookPath("certutil"); err == nil {
		db := "sql:" + filepath.Join(home, ".pki", "nssdb")
		if err := os.MkdirAll(filepath.Join(home, ".pki", "nssdb"), 0o700); err != nil {
			t.Fatal(err)
		}
		caFile := filepath.Join(dir, "ca.pem")
		if err := os.WriteFile(caFile, s.ca.CertPEM, 0o644); err != nil {
			t.Fatal(err)
		}
		tool(t, "certutil", "-d", db, "-N", "--empty-password")
		tool(t, "certutil", "-d", db, "-A", "-t", "C,,", "-n", "gracepoll examples/httpd CA", "-i", caFile)
	} else {
		trust = "the SPKI list (certutil not installed)"
		args = append(args, "--ignore-certificate-errors-spki-list="+s.ca.LeafSPKIHash())
	}
	t.Logf("Chromium trusts the CA through %s", trust)

	return func(extra ...string) (string, string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 2*timeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, append(append(slices.Clone(args), extra...), s.base+"/")...)
		cmd.Env = append(os.Environ(), "HOME="+home)
		var o, e bytes.Buffer
		cmd.Stdout, cmd.Stderr = &o, &e
		if err := cmd.Run(); err != nil {
			t.Fatalf("chromium %q: %v\n%s", extra, err, e.String())
		}
		return o.String(), e.String()
	}
}
