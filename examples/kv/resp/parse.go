// Package resp parses and writes RESP2, the Redis serialization protocol,
// as examples/kv serves it.
//
// A request is either a multibulk command (an array of bulk strings,
// "*2\r\n$3\r\nGET\r\n$1\r\nk\r\n") or an inline command (a line of words,
// "GET k\r\n", as telnet and redis-benchmark's PING_INLINE send). Parse
// works on the bytes a server has buffered so far and reports
// ErrIncomplete while a command is not all there; its arguments are slices
// of those bytes, not copies. The Append functions write replies.
// ReadValue reads a reply, for clients and tests.
package resp

import (
	"bytes"
	"errors"
)

// ErrIncomplete reports a buffer that holds only the start of a command:
// wait for more bytes and parse again from the same place.
var ErrIncomplete = errors.New("resp: incomplete command")

// ProtocolError is a request that is not RESP. The server answers
// "-ERR " + its Error() and closes the connection, as Redis does.
type ProtocolError struct{ Msg string }

func (e *ProtocolError) Error() string { return "Protocol error: " + e.Msg }

func protoErr(msg string) error { return &ProtocolError{msg} }

// Limits, as Redis's: the longest inline command, the most arguments of a
// multibulk command, and the longest "*N" or "$N" line.
const (
	MaxInline    = 64 << 10
	MaxArgs      = 1 << 20
	maxCountLine = 32
	// DefaultMaxBulk is the longest argument a zero Parser accepts.
	DefaultMaxBulk = 8 << 20
)

// Parser parses commands. Its zero value accepts arguments up to
// DefaultMaxBulk bytes. It reuses one slice of arguments: the result of
// Parse is valid until the next call.
type Parser struct {
	// MaxBulk bounds one argument's length; 0 means DefaultMaxBulk.
	MaxBulk int
	args    [][]byte
	scratch []byte // unquoted inline arguments
}

// Parse parses the command at the start of b. It returns its arguments and
// the number of bytes it took. An empty command (a blank line, "*0") has no
// arguments: skip n bytes. The arguments alias b (or, for inline arguments
// with escapes, the parser's own storage) until the next Parse. While b
// holds only part of a command Parse returns ErrIncomplete, having looked
// at the headers only: parsing a command whose 1 MB value arrives in many
// reads costs one pass over its headers per read, not over its bytes.
func (p *Parser) Parse(b []byte) (args [][]byte, n int, err error) {
	if len(b) == 0 {
		return nil, 0, ErrIncomplete
	}
	if b[0] != '*' {
		return p.inline(b)
	}
	count, pos, err := countLine(b, 0, "multibulk")
	if err != nil {
		return nil, 0, err
	}
	if count > MaxArgs {
		return nil, 0, protoErr("invalid multibulk length")
	}
	if count <= 0 {
		return nil, pos, nil
	}
	maxBulk := p.MaxBulk
	if maxBulk <= 0 {
		maxBulk = DefaultMaxBulk
	}
	args = p.args[:0]
	for range count {
		if pos >= len(b) {
			return nil, 0, ErrIncomplete
		}
		if b[pos] != '$' {
			return nil, 0, protoErr("expected '$', got '" + printable(b[pos]) + "'")
		}
		size, next, err := countLine(b, pos, "bulk")
		if err != nil {
			return nil, 0, err
		}
		if size < 0 || size > maxBulk {
			return nil, 0, protoErr("invalid bulk length")
		}
		end := next + size
		if end+2 > len(b) {
			return nil, 0, ErrIncomplete
		}
		if b[end] != '\r' || b[end+1] != '\n' {
			return nil, 0, protoErr("expected CRLF after bulk string")
		}
		args = append(args, b[next:end:end])
		pos = end + 2
	}
	p.args = args
	return args, pos, nil
}

// countLine parses "*N\r\n" or "$N\r\n" at b[pos:] and returns N and the
// position after the line.
func countLine(b []byte, pos int, what string) (int, int, error) {
	window := b[pos:min(len(b), pos+maxCountLine)]
	cr := bytes.IndexByte(window, '\r')
	if cr < 0 {
		if len(window) == maxCountLine {
			return 0, 0, protoErr("too big " + what + " count string")
		}
		return 0, 0, ErrIncomplete
	}
	if pos+cr+1 >= len(b) {
		return 0, 0, ErrIncomplete
	}
	if b[pos+cr+1] != '\n' {
		return 0, 0, protoErr("expected CRLF after " + what + " count")
	}
	n, ok := parseInt(window[1:cr])
	if !ok {
		return 0, 0, protoErr("invalid " + what + " length")
	}
	return n, pos + cr + 2, nil
}

// parseInt parses a decimal integer of at most 18 digits, with an optional
// minus sign.
func parseInt(b []byte) (int, bool) {
	neg := len(b) > 0 && b[0] == '-'
	if neg {
		b = b[1:]
	}
	if len(b) == 0 || len(b) > 18 {
		return 0, false
	}
	n := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	if neg {
		n = -n
	}
	return n, true
}

func printable(c byte) string {
	if c >= 0x20 && c < 0x7f {
		return string(rune(c))
	}
	return "\\x" + string("0123456789abcdef"[c>>4]) + string("0123456789abcdef"[c&15])
}

// inline parses a line of words separated by spaces or tabs. Words may be
// quoted as Redis's inline protocol allows: "..." with the escapes \n \r
// \t \b \a \\ \" \xHH, or '...' with \'.
func (p *Parser) inline(b []byte) ([][]byte, int, error) {
	nl := bytes.IndexByte(b[:min(len(b), MaxInline+1)], '\n')
	if nl < 0 {
		if len(b) > MaxInline {
			return nil, 0, protoErr("too big inline request")
		}
		return nil, 0, ErrIncomplete
	}
	line := b[:nl]
	if len(line) > 0 && line[len(line)-1] == '\r' {
		line = line[:len(line)-1]
	}
	args := p.args[:0]
	p.scratch = p.scratch[:0]
	for i := 0; ; {
		for i < len(line) && isSpace(line[i]) {
			i++
		}
		if i == len(line) {
			break
		}
		if line[i] != '"' && line[i] != '\'' {
			j := i
			for j < len(line) && !isSpace(line[j]) {
				j++
			}
			args = append(args, line[i:j:j])
			i = j
			continue
		}
		start := len(p.scratch)
		j, ok := p.unquote(line, i)
		if !ok {
			return nil, 0, protoErr("unbalanced quotes in request")
		}
		args = append(args, p.scratch[start:len(p.scratch):len(p.scratch)])
		i = j
	}
	p.args = args
	if len(args) == 0 {
		return nil, nl + 1, nil
	}
	return args, nl + 1, nil
}

// unquote appends the quoted word at line[i] to p.scratch and returns the
// position after it; the closing quote must be followed by a space or the
// end of the line.
func (p *Parser) unquote(line []byte, i int) (int, bool) {
	q := line[i]
	for i++; i < len(line); i++ {
		c := line[i]
		switch {
		case c == q:
			if i+1 < len(line) && !isSpace(line[i+1]) {
				return 0, false
			}
			return i + 1, true
		case c == '\\' && i+1 < len(line) && q == '\'':
			if line[i+1] == '\'' {
				i++
				c = '\''
			}
		case c == '\\' && i+3 < len(line) && line[i+1] == 'x' && isHex(line[i+2]) && isHex(line[i+3]):
			c = unhex(line[i+2])<<4 | unhex(line[i+3])
			i += 3
		case c == '\\' && i+1 < len(line):
			i++
			switch c = line[i]; c {
			case 'n':
				c = '\n'
			case 'r':
				c = '\r'
			case 't':
				c = '\t'
			case 'b':
				c = '\b'
			case 'a':
				c = '\a'
			}
		}
		p.scratch = append(p.scratch, c)
	}
	return 0, false
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' }

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c >= 'a':
		return c - 'a' + 10
	case c >= 'A':
		return c - 'A' + 10
	}
	return c - '0'
}
