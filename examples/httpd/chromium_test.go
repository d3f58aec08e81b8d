//go:build linux

package main

import (
	"bytes"
	"context"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gracepoll/gracepoll/internal/testkit"
)

// TestChromium loads the page over TLS in headless Chromium, trusting
// the example's CA, and checks what a user would see: every asset of the
// page served 200 (the server's own record of the requests), the script
// ran and filled in the time from /api/time (the DOM after load), and a
// screenshot was drawn.
//
// The CA is trusted the way a user would trust it, in an NSS database
// under a temporary HOME, when certutil (libnss3-tools) is installed;
// otherwise by the leaf's SPKI hash (--ignore-certificate-errors-spki-list).
func TestChromium(t *testing.T) {
	bin := testkit.Chromium(t)
	s := serveSite(t, true)
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

	run := func(extra ...string) (string, string) {
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

	dom, stderr := run("--dump-dom")
	if !strings.Contains(dom, `<p id="time" class="ok">server time `) {
		t.Errorf("the script did not fill in the time (stderr below):\n%s\n%s", dom, stderr)
	}
	if strings.Contains(stderr, "ERR_CERT") {
		t.Errorf("certificate error:\n%s", stderr)
	}

	shot := filepath.Join(dir, "page.png")
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
}
