package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gracepoll/gracepoll/internal/testkit"
)

// TestNode runs testdata/client.js, a client on the npm ws package, with
// and without permessage-deflate: each of its connections receives its
// own message and a Go client's, and the Go client receives node's.
func TestNode(t *testing.T) {
	modules := testkit.NodeModules(t)
	ch := startChat(t)
	gopher := ch.dial(t, "gopher", true, true)

	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", filepath.Join("testdata", "client.js"), ch.url, "gopher")
	cmd.Env = append(os.Environ(), "NODE_PATH="+modules)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()

	// Answer each of node's joins, and collect what it says in the room.
	var said []string
	for _, name := range []string{"node#", "nodez#"} {
		who := gopher.waitJoin(name)
		gopher.send("hello from gopher")
		for e := gopher.nextMsg(); ; e = gopher.nextMsg() {
			if e.From == who {
				said = append(said, e.Text)
				break
			}
		}
	}
	if err := <-done; err != nil {
		t.Fatalf("node: %v\n%s", err, out.String())
	}
	t.Logf("node:\n%s", out.String())
	if !strings.HasSuffix(out.String(), "PASS\n") || !strings.Contains(out.String(), "compressed=true") {
		t.Errorf("node did not pass:\n%s", out.String())
	}
	if len(said) != 2 || said[0] != "hello from node" || said[1] != "hello from nodez "+strings.Repeat("compressible ", 2000) {
		t.Errorf("the Go client got %d messages from node, not the two it sent", len(said))
	}
}
