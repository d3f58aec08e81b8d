//go:build linux

package peers

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The launcher, cmd/serve, is built once per test binary run into a
// directory that TestMain removes.
var launcher struct {
	once sync.Once
	dir  string
	path string
	err  error
}

// buildLauncher builds cmd/serve, once, and returns the binary's path.
// A test runs in its package's directory, so ./cmd/serve is this module's
// launcher built against this checkout of gracepoll.
func buildLauncher() (string, error) {
	launcher.once.Do(func() {
		dir, err := os.MkdirTemp("", "gracepoll-serve-")
		if err != nil {
			launcher.err = err
			return
		}
		launcher.dir = dir
		path := filepath.Join(dir, "serve")
		gobin := "go"
		if root := os.Getenv("GOROOT"); root != "" {
			gobin = filepath.Join(root, "bin", "go")
		}
		cmd := exec.Command(gobin, "build", "-o", path, "./cmd/serve")
		if out, err := cmd.CombinedOutput(); err != nil {
			launcher.err = fmt.Errorf("go build ./cmd/serve: %v\n%s", err, out)
			return
		}
		launcher.path = path
	})
	return launcher.path, launcher.err
}

func TestMain(m *testing.M) {
	code := m.Run()
	if launcher.dir != "" {
		os.RemoveAll(launcher.dir)
	}
	os.Exit(code)
}

// child is a server running in a process of its own.
type child struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stderr *capped
	lines  chan string // stdout after the address line; closed at end-of-file
	addr   string
	done   chan struct{} // closed once Wait has returned
	err    error         // Wait's result, valid after done
}

// Pid returns the child's process id.
func (c *child) Pid() int { return c.cmd.Process.Pid }

// startTimeout bounds the wait for the child's address line.
const startTimeout = 15 * time.Second

// startChild starts path with args and env added to this process's
// environment, on cpu (see startOn) if cpu >= 0, and waits up to timeout for
// its "addr host:port" line on stdout. A child that exits first, prints something else or says nothing
// in time is killed and reported with what it wrote to stderr.
func startChild(path string, args, env []string, cpu int, timeout time.Duration) (*child, error) {
	cmd := exec.Command(path, args...)
	cmd.Env = append(os.Environ(), env...)
	// If this process dies without closing stdin, the kernel kills the
	// child anyway.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		stdin.Close()
		return nil, err
	}
	cmd.Stdout = pw
	c := &child{cmd: cmd, stdin: stdin, stderr: &capped{max: 64 << 10}, done: make(chan struct{}), lines: make(chan string, 16)}
	cmd.Stderr = c.stderr
	err = startOn(cmd, cpu)
	pw.Close() // the child holds its own copy
	if err != nil {
		pr.Close()
		stdin.Close()
		return nil, err
	}
	go func() {
		c.err = cmd.Wait()
		close(c.done)
	}()
	line := make(chan string, 1)
	go func() {
		defer pr.Close()
		sc := bufio.NewScanner(pr)
		// "stats" answers with the poller's statistics on one line,
		// a waiter and a reclaimer participant each: up to MaxWaiters.
		sc.Buffer(make([]byte, 64<<10), 8<<20)
		if sc.Scan() {
			line <- sc.Text()
		} else {
			line <- ""
		}
		for sc.Scan() { // answers, until the child exits
			select {
			case c.lines <- sc.Text():
			default: // nobody asked: drop it
			}
		}
		close(c.lines)
		io.Copy(io.Discard, pr)
	}()
	name := filepath.Base(path) + " " + strings.Join(args, " ")
	select {
	case l := <-line:
		addr, ok := strings.CutPrefix(l, "addr ")
		if ok && addr != "" {
			c.addr = addr
			return c, nil
		}
		c.kill()
		if l == "" {
			return nil, fmt.Errorf("%s exited before printing its address (%v); stderr:\n%s", name, c.err, c.stderr)
		}
		return nil, fmt.Errorf("%s printed %q, want \"addr host:port\"; stderr:\n%s", name, l, c.stderr)
	case <-time.After(timeout):
		c.kill()
		return nil, fmt.Errorf("%s did not print its address within %v; killed; stderr:\n%s", name, timeout, c.stderr)
	}
}

// startOn starts cmd with its affinity set to cpu from the first
// instruction: the child inherits the CPU mask of the thread that forks it,
// so this goroutine forks from its own thread pinned to cpu for the
// moment. The child's runtime then sees one CPU (runtime.NumCPU) and none
// of its threads ever runs on the client's CPU.
func startOn(cmd *exec.Cmd, cpu int) error {
	if cpu < 0 {
		return cmd.Start()
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var saved, set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &saved); err != nil {
		return err
	}
	set.Set(cpu)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		return fmt.Errorf("pin the forking thread to CPU %d: %w", cpu, err)
	}
	err := cmd.Start()
	if rerr := unix.SchedSetaffinity(0, &saved); rerr != nil && err == nil {
		// This thread would stay on the server's CPU.
		cmd.Process.Kill()
		cmd.Wait()
		return fmt.Errorf("restore the forking thread's CPU mask: %w", rerr)
	}
	return err
}

// ask sends cmd on the child's stdin (the launcher's protocol, see
// cmd/serve) and returns its one-line answer's fields "key=value" after the
// answer's first word, which must be want.
func (c *child) ask(cmd, want string) (map[string]float64, error) {
	if _, err := io.WriteString(c.stdin, cmd+"\n"); err != nil {
		return nil, fmt.Errorf("server process %d: send %q: %w", c.Pid(), cmd, err)
	}
	select {
	case l, ok := <-c.lines:
		if !ok {
			return nil, fmt.Errorf("server process %d exited before answering %q; stderr:\n%s", c.Pid(), cmd, c.stderr)
		}
		f := strings.Fields(l)
		if len(f) == 0 || f[0] != want {
			return nil, fmt.Errorf("server process %d answered %q to %q, want %q ...", c.Pid(), l, cmd, want)
		}
		kv := map[string]float64{}
		for _, p := range f[1:] {
			k, v, ok := strings.Cut(p, "=")
			if !ok {
				continue
			}
			x, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return nil, fmt.Errorf("server process %d: %q in %q", c.Pid(), p, l)
			}
			kv[k] = x
		}
		return kv, nil
	case <-time.After(10 * time.Second):
		return nil, fmt.Errorf("server process %d did not answer %q within 10s", c.Pid(), cmd)
	}
}

// stop asks the child to exit by closing its stdin and waits for it, up to
// 10 s; then it kills it. It returns an error if the child did not exit
// cleanly by itself.
func (c *child) stop() error {
	c.stdin.Close()
	select {
	case <-c.done:
	case <-time.After(10 * time.Second):
		c.kill()
		return fmt.Errorf("server process %d did not exit within 10s of end-of-stdin; killed; stderr:\n%s", c.Pid(), c.stderr)
	}
	if c.err != nil {
		return fmt.Errorf("server process %d: %v; stderr:\n%s", c.Pid(), c.err, c.stderr)
	}
	return nil
}

// kill kills the child and waits for it.
func (c *child) kill() {
	c.stdin.Close()
	c.cmd.Process.Kill()
	<-c.done
}

// capped is a goroutine-safe buffer that keeps the first max bytes.
type capped struct {
	mu  sync.Mutex
	buf bytes.Buffer
	max int
}

func (c *capped) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if room := c.max - c.buf.Len(); room > 0 {
		c.buf.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

func (c *capped) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.buf.Len() == 0 {
		return "(nothing)"
	}
	return c.buf.String()
}

var errNoCPUs = errors.New("fewer than two CPUs in this process's affinity mask")
