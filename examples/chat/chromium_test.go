//go:build linux

package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gracepoll/gracepoll/internal/testkit"
)

// TestChromium opens the page in headless Chromium, over ws:// and over
// wss:// (trusting the CA the program wrote), in its self-test mode: the
// page joins as "page", sends a message, and waits for the room to send
// back both that message and one from a Go client, "gopher"; then it
// says PASS in the room. The Go client checks the other half: it
// receives the page's message and its verdict.
//
// The verdict travels through the room rather than --dump-dom because
// --dump-dom needs --virtual-time-budget to wait for anything after the
// load, and virtual time runs the page's timers ahead of the real
// WebSocket traffic.
func TestChromium(t *testing.T) {
	bin := testkit.Chromium(t)
	for _, secure := range []bool{false, true} {
		name := "ws"
		if secure {
			name = "wss"
		}
		t.Run(name, func(t *testing.T) {
			var args []string
			if secure {
				args = []string{"-tls-self-signed"}
			}
			ch := startChat(t, args...)
			gopher := ch.dial(t, "gopher", false, true)
			dir := t.TempDir()
			home := filepath.Join(dir, "home")
			flags := []string{
				"--headless", "--disable-gpu", "--no-first-run", "--no-default-browser-check",
				// The sandbox needs user namespaces, which a container or
				// root may not have; the page is our own.
				"--no-sandbox",
				"--user-data-dir=" + filepath.Join(dir, "profile"),
				// localhost may resolve to ::1 first; the server listens
				// on 127.0.0.1 only.
				"--host-resolver-rules=MAP localhost 127.0.0.1",
			}
			if secure {
				flags = append(flags, trustCA(t, ch, home)...)
			}
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			cmd := exec.CommandContext(ctx, bin, append(flags, ch.base+"/?selftest=1&name=page&peer=gopher")...)
			cmd.Env = append(os.Environ(), "HOME="+home)
			// Written by exec's copying goroutine while the test reads it.
			var stderr testkit.SyncBuffer
			cmd.Stderr = &stderr
			// Chromium runs until killed, with helper processes: kill
			// its whole process group.
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
			cmd.WaitDelay = 5 * time.Second
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() {
				cancel()
				cmd.Wait()
				if t.Failed() {
					t.Logf("chromium's stderr:\n%s", stderr.String())
				}
			}()

			pageName := gopher.waitJoin("page#")
			gopher.send("hello from gopher")
			var gotPage bool
			for {
				e := gopher.nextMsg()
				if e.From != pageName {
					continue
				}
				if strings.HasPrefix(e.Text, "hello from the page ") {
					gotPage = true
					continue
				}
				want := "PASS selftest http: as " + pageName
				if secure {
					want = "PASS selftest https: as " + pageName
				}
				if e.Text != want {
					t.Fatalf("the page says %q, want %q", e.Text, want)
				}
				break
			}
			if !gotPage {
				t.Errorf("the page's own message did not reach the Go client before its verdict")
			}
			if strings.Contains(stderr.String(), "ERR_CERT") {
				t.Errorf("certificate error:\n%s", stderr.String())
			}
		})
	}
}

// trustCA makes Chromium trust the program's CA: in an NSS database
// under home when certutil (libnss3-tools) is installed, as a user
// would; otherwise by the leaf's SPKI hash, which the program prints.
// It returns the flags that go with it.
func trustCA(t *testing.T, ch *chat, home string) []string {
	t.Helper()
	if _, err := exec.LookPath("certutil"); err != nil {
		_, hash, ok := strings.Cut(ch.out.String(), "--ignore-certificate-errors-spki-list=")
		hash, _, _ = strings.Cut(hash, " ")
		if !ok || hash == "" {
			t.Fatalf("no SPKI hash in the output:\n%s", ch.out)
		}
		t.Log("Chromium trusts the leaf through the SPKI list (certutil not installed)")
		return []string{"--ignore-certificate-errors-spki-list=" + hash}
	}
	nssdb := filepath.Join(home, ".pki", "nssdb")
	if err := os.MkdirAll(nssdb, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"-d", "sql:" + nssdb, "-N", "--empty-password"},
		{"-d", "sql:" + nssdb, "-A", "-t", "C,,", "-n", "gracepoll examples/chat CA", "-i", ch.caFile},
	} {
		if out, err := exec.Command("certutil", args...).CombinedOutput(); err != nil {
			t.Fatalf("certutil %q: %v\n%s", args, err, out)
		}
	}
	t.Log("Chromium trusts the CA through an NSS database (certutil)")
	return nil
}
