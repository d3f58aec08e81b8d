package resp

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
)

// Value is a reply as a client reads it.
type Value struct {
	// Kind is the reply's type byte: '+' simple string, '-' error, ':'
	// integer, '$' bulk string, '*' array.
	Kind  byte
	Str   string  // simple string, error or bulk string
	Int   int64   // integer
	Array []Value // array
	Null  bool    // $-1 or *-1
}

// String renders v as redis-cli does, roughly: errors as "(error) ...",
// nulls as "(nil)", arrays as [a b c].
func (v Value) String() string {
	switch {
	case v.Null:
		return "(nil)"
	case v.Kind == '-':
		return "(error) " + v.Str
	case v.Kind == ':':
		return "(integer) " + strconv.FormatInt(v.Int, 10)
	case v.Kind == '*':
		return fmt.Sprint(v.Array)
	}
	return v.Str
}

// ReadValue reads one reply from r.
func ReadValue(r *bufio.Reader) (Value, error) {
	line, err := r.ReadSlice('\n')
	if err != nil {
		return Value{}, err
	}
	if len(line) < 3 || line[len(line)-2] != '\r' {
		return Value{}, fmt.Errorf("resp: bad reply line %q", line)
	}
	kind, body := line[0], string(line[1:len(line)-2])
	v := Value{Kind: kind}
	switch kind {
	case '+', '-':
		v.Str = body
	case ':':
		v.Int, err = strconv.ParseInt(body, 10, 64)
	case '$':
		var n int
		if n, err = strconv.Atoi(body); err != nil || n < -1 {
			return v, fmt.Errorf("resp: bad bulk length %q", body)
		}
		if n == -1 {
			v.Null = true
			return v, nil
		}
		buf := make([]byte, n+2)
		if _, err = io.ReadFull(r, buf); err != nil {
			return v, err
		}
		if buf[n] != '\r' || buf[n+1] != '\n' {
			return v, fmt.Errorf("resp: bulk string not followed by CRLF")
		}
		v.Str = string(buf[:n])
	case '*':
		var n int
		if n, err = strconv.Atoi(body); err != nil || n < -1 {
			return v, fmt.Errorf("resp: bad array length %q", body)
		}
		if n == -1 {
			v.Null = true
			return v, nil
		}
		v.Array = make([]Value, n)
		for i := range v.Array {
			if v.Array[i], err = ReadValue(r); err != nil {
				return v, err
			}
		}
	default:
		return v, fmt.Errorf("resp: unknown reply type %q", kind)
	}
	return v, err
}
