package resp

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func strs(args [][]byte) []string {
	var s []string
	for _, a := range args {
		s = append(s, string(a))
	}
	return s
}

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
		n    int
	}{
		{"*1\r\n$4\r\nPING\r\n", []string{"PING"}, 14},
		{"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n", []string{"SET", "k", ""}, 26},
		{"*2\r\n$4\r\nECHO\r\n$4\r\na\r\nb\r\n*1\r\n", []string{"ECHO", "a\r\nb"}, 24}, // binary-safe; stops at the end of the command
		{"*0\r\n", nil, 4},
		{"*-1\r\n", nil, 5},
		{"PING\r\n", []string{"PING"}, 6},
		{"PING\n", []string{"PING"}, 5},
		{"  set  k\tv \r\nGET", []string{"set", "k", "v"}, 13},
		{"\r\n", nil, 2},
		{"set k \"a b\\r\\n\\x41\\\"\"\r\n", []string{"set", "k", "a b\r\nA\""}, 23},
		{"set k 'it\\'s' \"\"\r\n", []string{"set", "k", "it's", ""}, 18},
	} {
		var p Parser
		args, n, err := p.Parse([]byte(tc.in))
		if err != nil || n != tc.n || !cmp.Equal(strs(args), tc.want) {
			t.Errorf("Parse(%q) = %q, %d, %v; want %q, %d", tc.in, strs(args), n, err, tc.want, tc.n)
		}
	}
}

// TestParseIncomplete: every strict prefix of a command is incomplete,
// whichever read it was cut at.
func TestParseIncomplete(t *testing.T) {
	for _, cmd := range []string{
		"*3\r\n$3\r\nSET\r\n$3\r\nkey\r\n$10\r\n0123456789\r\n",
		"*1\r\n$4\r\nPING\r\n",
		"SET k \"v w\"\r\n",
	} {
		var p Parser
		for i := range len(cmd) {
			if args, n, err := p.Parse([]byte(cmd[:i])); !errors.Is(err, ErrIncomplete) || n != 0 || args != nil {
				t.Errorf("Parse(%q) = %q, %d, %v; want ErrIncomplete", cmd[:i], strs(args), n, err)
			}
		}
		if _, n, err := p.Parse([]byte(cmd)); err != nil || n != len(cmd) {
			t.Errorf("Parse(%q): %d, %v", cmd, n, err)
		}
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"*x\r\n", "invalid multibulk length"},
		{"*2000000\r\n", "invalid multibulk length"},
		{"*1\r\n+PING\r\n", "expected '$', got '+'"},
		{"*1\r\n$-2\r\n", "invalid bulk length"},
		{"*1\r\n$abc\r\n", "invalid bulk length"},
		{"*1\r\n$9000000\r\n", "invalid bulk length"},
		{"*1\r\n$4\r\nPINGxx", "expected CRLF after bulk string"},
		{"*1\rx", "expected CRLF after multibulk count"},
		{"*" + strings.Repeat("1", 40), "too big multibulk count string"},
		{"*1\r\n$" + strings.Repeat("1", 40), "too big bulk count string"},
		{strings.Repeat("a", MaxInline+1), "too big inline request"},
		{"set k \"abc\r\n", "unbalanced quotes in request"},
		{"set k \"a\"b\r\n", "unbalanced quotes in request"},
	} {
		var p Parser
		_, _, err := p.Parse([]byte(tc.in))
		var pe *ProtocolError
		if !errors.As(err, &pe) || pe.Msg != tc.want {
			t.Errorf("Parse(%.40q) = %v, want protocol error %q", tc.in, err, tc.want)
		}
	}
	p := Parser{MaxBulk: 3}
	if _, _, err := p.Parse([]byte("*1\r\n$4\r\nPING\r\n")); err == nil {
		t.Error("MaxBulk 3 took 4 bytes")
	}
}

// TestParseLargeValueHeadersOnly: a 1 MB argument arriving in pieces is
// incomplete until its last byte, and Parse does not read its bytes.
func TestParseLargeValue(t *testing.T) {
	val := bytes.Repeat([]byte("v"), 1<<20)
	cmd := AppendCommand(nil, "SET", "big", string(val))
	var p Parser
	for cut := 0; cut < len(cmd); cut += 64 << 10 {
		if _, _, err := p.Parse(cmd[:cut]); !errors.Is(err, ErrIncomplete) {
			t.Fatalf("cut %d: %v", cut, err)
		}
	}
	args, n, err := p.Parse(cmd)
	if err != nil || n != len(cmd) || !bytes.Equal(args[2], val) {
		t.Fatalf("%d %v", n, err)
	}
	if &args[2][0] != &cmd[len(cmd)-2-len(val)] {
		t.Error("the argument is a copy, not a slice of the input")
	}
}

func TestPipeline(t *testing.T) {
	var in []byte
	for i := range 100 {
		in = AppendCommand(in, "SET", fmt.Sprint("k", i), "v")
		in = append(in, "GET k\r\n"...)
	}
	var p Parser
	got := 0
	for off := 0; off < len(in); got++ {
		args, n, err := p.Parse(in[off:])
		if err != nil {
			t.Fatal(err)
		}
		if want := []string{"GET", "k"}; got%2 == 1 && !cmp.Equal(strs(args), want) {
			t.Fatalf("command %d: %q", got, strs(args))
		}
		off += n
	}
	if got != 200 {
		t.Errorf("%d commands, want 200", got)
	}
}

func TestReplies(t *testing.T) {
	var b []byte
	b = AppendSimple(b, "OK")
	b = AppendError(b, "ERR x")
	b = AppendInt(b, -42)
	b = AppendBulk(b, []byte("a\r\nb"))
	b = AppendBulkString(b, "")
	b = AppendNull(b)
	b = AppendNullArray(b)
	b = AppendArray(b, 2)
	b = AppendInt(b, 1)
	b = AppendBulkString(b, "x")
	want := "+OK\r\n-ERR x\r\n:-42\r\n$4\r\na\r\nb\r\n$0\r\n\r\n$-1\r\n*-1\r\n*2\r\n:1\r\n$1\r\nx\r\n"
	if string(b) != want {
		t.Fatalf("%q\nwant %q", b, want)
	}
	r := bufio.NewReader(bytes.NewReader(b))
	var got []string
	for range 8 {
		v, err := ReadValue(r)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, v.String())
	}
	if want := []string{"OK", "(error) ERR x", "(integer) -42", "a\r\nb", "", "(nil)", "(nil)", "[(integer) 1 x]"}; !cmp.Equal(got, want) {
		t.Errorf("%q", got)
	}
	for _, bad := range []string{"?x\r\n", "$5\r\nab\r\n", "+OK\n", "$x\r\n", "*x\r\n"} {
		if _, err := ReadValue(bufio.NewReader(strings.NewReader(bad))); err == nil {
			t.Errorf("ReadValue(%q) succeeded", bad)
		}
	}
}

// FuzzParse: Parse never panics, never takes more than it is given, and a
// command it parses, written again as multibulk, parses to the same
// arguments, every strict prefix of which is incomplete.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"*1\r\n$4\r\nPING\r\n", "PING\r\n", "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n",
		"set k \"a\\x41\"\r\n", "*-1\r\n", "*1\r\n$-1\r\n", "\r\n\r\n", "'", "*1\r\n$1\r\n", "\"\\",
		"*2\r\n$4\r\nECHO\r\n$3\r\na\nb\r\n", "*1\r\n$99999999999999999999\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		var p Parser
		args, n, err := p.Parse(in)
		if err != nil {
			return
		}
		if n <= 0 || n > len(in) {
			t.Fatalf("consumed %d of %d", n, len(in))
		}
		if len(args) == 0 {
			return
		}
		want := strs(args)
		enc := AppendCommand(nil, want...)
		var q Parser
		again, m, err := q.Parse(enc)
		if err != nil || m != len(enc) || !cmp.Equal(strs(again), want) {
			t.Fatalf("re-encoded %q: %q, %d, %v", enc, strs(again), m, err)
		}
		for i := range enc {
			if _, _, err := q.Parse(enc[:i]); !errors.Is(err, ErrIncomplete) {
				t.Fatalf("prefix %q: %v", enc[:i], err)
			}
		}
	})
}
