package testkit

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// Chromium returns the path of a Chromium or Chrome binary, skipping the
// test, saying how to install one, if there is none.
func Chromium(t testing.TB) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("chromium not installed: apt-get install chromium (or chromium-browser, google-chrome)")
	return ""
}

// NodeModules returns the node_modules directory that holds the npm ws
// package, skipping the test if node or ws is missing: tests install
// nothing (.ci/run does, into a cache outside the repository).
func NodeModules(t testing.TB) string {
	t.Helper()
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("node not installed: apt-get install nodejs")
	}
	dirs := []string{os.Getenv("GRACEPOLL_NODE_MODULES")}
	if home, err := os.UserHomeDir(); err == nil {
		dirs = append(dirs, filepath.Join(home, ".cache", "gracepoll-node", "node_modules"))
	}
	for _, d := range dirs {
		if d == "" {
			continue
		}
		if _, err := os.Stat(filepath.Join(d, "ws", "package.json")); err == nil {
			return d
		}
	}
	t.Skip(`the npm ws package is not installed: npm install --prefix "$HOME/.cache/gracepoll-node" ws, or set GRACEPOLL_NODE_MODULES to a node_modules directory holding it`)
	return ""
}

// SyncBuffer is a bytes.Buffer that a program under test may write while
// the test reads it.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p to the buffer.
func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what has been written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
