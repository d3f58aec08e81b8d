package resp

import "strconv"

// AppendSimple appends a simple string reply: +s.
func AppendSimple(b []byte, s string) []byte {
	b = append(b, '+')
	b = append(b, s...)
	return append(b, '\r', '\n')
}

// AppendError appends an error reply: -msg. By convention msg starts with
// an upper-case code, such as "ERR" or "WRONGTYPE".
func AppendError(b []byte, msg string) []byte {
	b = append(b, '-')
	b = append(b, msg...)
	return append(b, '\r', '\n')
}

// AppendInt appends an integer reply: :n.
func AppendInt(b []byte, n int64) []byte {
	b = append(b, ':')
	b = strconv.AppendInt(b, n, 10)
	return append(b, '\r', '\n')
}

// AppendBulk appends a bulk string reply: $len, v.
func AppendBulk(b []byte, v []byte) []byte {
	b = append(b, '$')
	b = strconv.AppendInt(b, int64(len(v)), 10)
	b = append(b, '\r', '\n')
	b = append(b, v...)
	return append(b, '\r', '\n')
}

// AppendBulkString is AppendBulk of a string.
func AppendBulkString(b []byte, s string) []byte {
	b = append(b, '$')
	b = strconv.AppendInt(b, int64(len(s)), 10)
	b = append(b, '\r', '\n')
	b = append(b, s...)
	return append(b, '\r', '\n')
}

// AppendNull appends the null bulk string: $-1.
func AppendNull(b []byte) []byte { return append(b, "$-1\r\n"...) }

// AppendNullArray appends the null array: *-1.
func AppendNullArray(b []byte) []byte { return append(b, "*-1\r\n"...) }

// AppendArray appends the header of an array of n elements; append the
// elements after it.
func AppendArray(b []byte, n int) []byte {
	b = append(b, '*')
	b = strconv.AppendInt(b, int64(n), 10)
	return append(b, '\r', '\n')
}

// AppendCommand appends a command as a client sends it: an array of bulk
// strings.
func AppendCommand(b []byte, args ...string) []byte {
	b = AppendArray(b, len(args))
	for _, a := range args {
		b = AppendBulkString(b, a)
	}
	return b
}
