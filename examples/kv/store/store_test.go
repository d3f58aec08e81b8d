package store

import (
	"bufio"
	"bytes"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gracepoll/gracepoll/examples/kv/resp"
)

// do runs one command (words split on spaces) and returns its reply as
// redis-cli would print it.
func do(t *testing.T, s *Store, c *Session, cmd string) string {
	t.Helper()
	var args [][]byte
	for _, w := range strings.Fields(cmd) {
		args = append(args, []byte(w))
	}
	out := s.Exec(c, args, nil)
	v, err := resp.ReadValue(bufio.NewReader(bytes.NewReader(out)))
	if err != nil {
		t.Fatalf("%s: reply %q: %v", cmd, out, err)
	}
	return v.String()
}

func TestCommands(t *testing.T) {
	s, c := New(4), &Session{ID: 7}
	for _, step := range [][2]string{
		{"PING", "PONG"}, {"ping hi", "hi"}, {"ping a b", "(error) ERR wrong number of arguments for 'ping' command"},
		{"ECHO x", "x"}, {"echo", "(error) ERR wrong number of arguments for 'echo' command"},
		{"GET k", "(nil)"}, {"SET k v", "OK"}, {"get k", "v"}, {"SET k w GET", "v"}, {"SET k v NX", "(nil)"},
		{"SET n 1 XX", "(nil)"}, {"SET k x XX", "OK"}, {"STRLEN k", "(integer) 1"}, {"SET k v EX 0", "(error) ERR invalid expire time in 'set' command"},
		{"SET k v BOGUS", "(error) ERR syntax error"}, {"SET k v NX XX", "(error) ERR syntax error"},
		{"EXISTS k n", "(integer) 1"}, {"DEL k n", "(integer) 1"}, {"DEL k", "(integer) 0"},
		{"INCR n", "(integer) 1"}, {"INCRBY n 10", "(integer) 11"}, {"DECR n", "(integer) 10"}, {"DECRBY n 20", "(integer) -10"},
		{"SET s abc", "OK"}, {"INCR s", "(error) ERR value is not an integer or out of range"},
		{"SET big 9223372036854775807", "OK"}, {"INCR big", "(error) ERR increment or decrement would overflow"},
		{"MSET a 1 b 2", "OK"}, {"MGET a b zz", "[1 2 (nil)]"}, {"MSET a", "(error) ERR wrong number of arguments for 'mset' command"},
		{"LPUSH l a b c", "(integer) 3"}, {"RPUSH l z", "(integer) 4"}, {"LRANGE l 0 -1", "[c b a z]"}, {"LRANGE l -2 100", "[a z]"},
		{"LLEN l", "(integer) 4"}, {"LPOP l", "c"}, {"RPOP l", "z"}, {"LPOP l 5", "[b a]"}, {"LPOP l", "(nil)"}, {"LPOP l 1", "(nil)"},
		{"EXISTS l", "(integer) 0"}, {"LPOP l -1", "(error) ERR value is out of range, must be positive"},
		{"LPUSH a x", "(error) WRONGTYPE Operation against a key holding the wrong kind of value"},
		{"RPUSH li x", "(integer) 1"}, {"GET li", "(error) WRONGTYPE Operation against a key holding the wrong kind of value"},
		{"INCR li", "(error) WRONGTYPE Operation against a key holding the wrong kind of value"},
		{"TYPE li", "list"}, {"TYPE a", "string"}, {"TYPE none", "none"},
		{"SET li s", "OK"}, {"TYPE li", "string"},
		{"DBSIZE", "(integer) 6"}, {"SELECT 0", "OK"}, {"SELECT 1", "(error) ERR DB index is out of range"},
		{"COMMAND", "[]"}, {"COMMAND DOCS", "[]"}, {"CONFIG GET save", "[save ]"}, {"CONFIG GET appendonly", "[appendonly no]"},
		{"CONFIG GET nothing", "[]"}, {"CONFIG SET x y", "OK"}, {"CONFIG", "(error) ERR wrong number of arguments for 'config' command"},
		{"CLIENT SETNAME me", "OK"}, {"CLIENT GETNAME", "me"}, {"CLIENT ID", "(integer) 7"}, {"CLIENT SETINFO lib-name x", "OK"},
		{"CLIENT BOGUS", "(error) ERR unknown subcommand or wrong number of arguments for 'BOGUS'"},
		{"HELLO 3", "(error) NOPROTO sorry, this protocol version is not supported"},
		{"HELLO 2", "[server redis version 7.0.0 proto (integer) 2 id (integer) 7 mode standalone role master modules []]"},
		{"NOSUCH a b c d e", "(error) ERR unknown command 'NOSUCH', with args beginning with: 'a' 'b' 'c' "},
		{"FLUSHALL", "OK"}, {"DBSIZE", "(integer) 0"},
		{"QUIT", "OK"},
	} {
		if got := do(t, s, c, step[0]); got != step[1] {
			t.Errorf("%s: %q, want %q", step[0], got, step[1])
		}
	}
	if !c.Quit {
		t.Error("QUIT did not ask to close")
	}
	if got := do(t, s, c, "INFO"); !strings.Contains(got, "redis_version:") || !strings.Contains(got, "# Keyspace") {
		t.Errorf("INFO: %q", got)
	}
}

func TestExpiry(t *testing.T) {
	s, c := New(1), &Session{}
	do(t, s, c, "SET k v PX 20")
	do(t, s, c, "SET keep v PX 20")
	do(t, s, c, "SET keep w KEEPTTL")
	if got := do(t, s, c, "GET k"); got != "v" {
		t.Fatalf("before expiry: %q", got)
	}
	time.Sleep(30 * time.Millisecond)
	for _, k := range []string{"k", "keep"} {
		if got := do(t, s, c, "GET "+k); got != "(nil)" {
			t.Errorf("%s after expiry: %q", k, got)
		}
	}
}

// TestValuesAreCopied: the store keeps copies, so the caller's input
// buffer may be reused after Exec.
func TestValuesAreCopied(t *testing.T) {
	s, c := New(1), &Session{}
	in := [][]byte{[]byte("SET"), []byte("k"), []byte("value")}
	s.Exec(c, in, nil)
	s.Exec(c, [][]byte{[]byte("RPUSH"), []byte("l"), in[2]}, nil)
	copy(in[2], "XXXXX")
	if got := do(t, s, c, "GET k"); got != "value" {
		t.Errorf("GET after the input changed: %q", got)
	}
	if got := do(t, s, c, "LPOP l"); got != "value" {
		t.Errorf("LPOP after the input changed: %q", got)
	}
}

// TestConcurrent: commands from many goroutines on shared and separate
// keys (run it with -race).
func TestConcurrent(t *testing.T) {
	s := New(8)
	const G, N = 8, 500
	var wg sync.WaitGroup
	for g := range G {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := &Session{}
			for i := range N {
				s.Exec(c, [][]byte{[]byte("INCR"), []byte("shared")}, nil)
				s.Exec(c, [][]byte{[]byte("LPUSH"), []byte("list"), []byte("x")}, nil)
				key := []byte(fmt.Sprint("k", g, "-", i%10))
				s.Exec(c, [][]byte{[]byte("SET"), key, key}, nil)
				s.Exec(c, [][]byte{[]byte("GET"), key}, nil)
			}
		}()
	}
	wg.Wait()
	c := &Session{}
	if got := do(t, s, c, "GET shared"); got != fmt.Sprint(G*N) {
		t.Errorf("shared counter %s, want %d", got, G*N)
	}
	if got := do(t, s, c, "LLEN list"); got != fmt.Sprint("(integer) ", G*N) {
		t.Errorf("list length %s", got)
	}
	if got := s.Len(); got != 2+G*10 {
		t.Errorf("%d keys", got)
	}
}

func TestDeque(t *testing.T) {
	var d deque
	var model []string
	for i := range 1000 {
		v := []byte(fmt.Sprint(i))
		switch i % 7 {
		case 0, 1, 2:
			d.pushFront(v)
			model = append([]string{string(v)}, model...)
		case 3, 4:
			d.pushBack(v)
			model = append(model, string(v))
		case 5:
			if d.n > 0 {
				if got := string(d.popFront()); got != model[0] {
					t.Fatalf("popFront %s, want %s", got, model[0])
				}
				model = model[1:]
			}
		case 6:
			if d.n > 0 {
				if got := string(d.popBack()); got != model[len(model)-1] {
					t.Fatalf("popBack %s", got)
				}
				model = model[:len(model)-1]
			}
		}
		if d.n != len(model) {
			t.Fatalf("len %d, want %d", d.n, len(model))
		}
	}
	for i, m := range model {
		if string(d.at(i)) != m {
			t.Fatalf("at(%d)", i)
		}
	}
}
