package h1

import (
	"bytes"
	"math"
)

// Default limits, used where a Limits field is zero or negative.
const (
	// DefaultMaxHeadBytes is net/http's DefaultMaxHeaderBytes.
	DefaultMaxHeadBytes = 1 << 20
	// DefaultMaxTargetBytes is nginx's default for a request line buffer.
	DefaultMaxTargetBytes = 8 << 10
	// DefaultMaxFields is Apache's LimitRequestFields default.
	DefaultMaxFields = 100
)

// Limits bounds a request head. A zero field means its default.
type Limits struct {
	MaxHeadBytes   int // request line, field lines and the empty line: 431 beyond
	MaxTargetBytes int // the request-target: 414 beyond
	MaxFields      int // field lines: 431 beyond
}

func (l Limits) withDefaults() Limits {
	if l.MaxHeadBytes <= 0 {
		l.MaxHeadBytes = DefaultMaxHeadBytes
	}
	if l.MaxTargetBytes <= 0 {
		l.MaxTargetBytes = DefaultMaxTargetBytes
	}
	if l.MaxFields <= 0 {
		l.MaxFields = DefaultMaxFields
	}
	return l
}

// Form is the form of a request-target (RFC 9112 section 3.2).
type Form uint8

// The request-target forms.
const (
	OriginForm    Form = iota + 1 // "/path?query"
	AbsoluteForm                  // "http://host/path?query"
	AuthorityForm                 // "host:port", CONNECT only
	AsteriskForm                  // "*", OPTIONS only
)

// Field is one field line: its name as sent and its value without leading
// and trailing whitespace.
type Field struct {
	Name, Value []byte
}

// Request is a parsed request head. Its byte slices point into the buffer
// given to Parse and are valid while that buffer is. A Request is reused
// from one Parse to the next: Fields keeps its capacity, so parsing
// allocates nothing once it has grown.
type Request struct {
	Method []byte
	Target []byte // the request-target as sent
	Form   Form
	Major  int // always 1
	Minor  int // as sent: 0 is HTTP/1.0, 1-9 are served as HTTP/1.1

	// Authority is the authority of an absolute-form or authority-form
	// target, else the Host field's value (empty without one in HTTP/1.0).
	Authority []byte
	// Fields are the field lines in order, Host and framing fields included.
	Fields []Field

	// ContentLength is the Content-Length, or -1 if there is none. A
	// request with neither a Content-Length nor Chunked has no body (RFC
	// 9112 section 6.3 item 7).
	ContentLength int64
	// Chunked reports Transfer-Encoding: chunked; the body follows the
	// head in the chunked coding (see ChunkedDecoder).
	Chunked bool
	// Close reports that the connection closes after the response: the
	// Connection field lists "close", or the request is HTTP/1.0 and does
	// not list "keep-alive" (RFC 9112 section 9.3). An HTTP/1.0 request
	// without Close asked for keep-alive, which the response must confirm
	// with its own "Connection: keep-alive" (RFC 9112 appendix C.2.2).
	Close bool
	// Continue reports Expect: 100-continue on HTTP/1.1.
	Continue bool
	// Upgrade reports an Upgrade field naming a protocol other than h2c
	// (RFC 9110 section 7.8). HTTP/2 over cleartext is not served, and a
	// server may ignore Upgrade, so h2c alone does not count.
	Upgrade bool

	clText []byte // the first Content-Length value
	st     state
}

// state is what Parse keeps across ErrIncomplete: offsets, not slices, so
// that the caller may move its buffer between calls.
type state struct {
	active   bool // a head is in progress
	lineDone bool // the request line is parsed
	pos      int  // the start of the first line not yet parsed

	method, target span
	host           span
	authority      span // the target's, if it has one
	form           Form
	fields         []fieldSpan
	hosts          int

	clDigits span // the first Content-Length value, to compare later ones
	cl       int64
	haveCL   bool

	te         bool // a Transfer-Encoding field was seen
	teBad      bool // malformed list, chunked twice or not last
	teOther    bool // a coding other than chunked
	teChunked  bool // chunked was seen
	teLastIsCh bool // the last coding seen is chunked

	connClose, connKeepAlive bool
	expectContinue           bool
	expectOther              bool
	upgrade                  bool
}

type span struct{ lo, hi int }

type fieldSpan struct{ name, value span }

// Reset abandons a head in progress, so that the next Parse starts afresh.
func (r *Request) Reset() {
	f := r.st.fields[:0]
	r.st = state{fields: f}
}

// Parse parses one request head from the start of buf and returns the
// number of bytes it took, up to and including the empty line that ends the
// head; the body, or the next request, follows.
//
// If buf does not yet hold a complete head, Parse returns ErrIncomplete and
// keeps what it has checked in r: call Parse again on the same Request with
// buf holding the same bytes followed by more (buf may be another slice,
// the caller's buffer having moved or grown). Parsing resumes at the first
// incomplete line, so a head delivered a byte at a time costs no more than
// one delivered whole. Any other error ends the head: the next call starts
// afresh, as does the call after a success. Call Reset to drop a head in
// progress.
func (r *Request) Parse(buf []byte, lim Limits) (int, error) {
	if !r.st.active {
		r.Reset()
		r.st.active = true
	}
	n, err := r.parse(buf, lim.withDefaults())
	if err != ErrIncomplete {
		r.st.active = false
	}
	return n, err
}

func (r *Request) parse(buf []byte, lim Limits) (int, error) {
	s := &r.st
	// Nothing beyond the limit is looked at: a head that has not ended
	// within it is too large whatever follows.
	win := buf
	if len(win) > lim.MaxHeadBytes {
		win = win[:lim.MaxHeadBytes]
	}
	if s.pos > len(win) {
		// Not the bytes of the last call followed by more: start afresh
		// rather than trust offsets into something else.
		r.Reset()
		s.active = true
	}
	incomplete := func() (int, error) {
		if len(buf) >= lim.MaxHeadBytes {
			return 0, ErrHeaderTooLarge
		}
		return 0, ErrIncomplete
	}
	for !s.lineDone {
		i := bytes.IndexByte(win[s.pos:], '\n')
		if i < 0 {
			if err := r.earlyTargetCheck(win[s.pos:], lim); err != nil {
				return 0, err
			}
			return incomplete()
		}
		line, err := crlfLine(win, s.pos, i)
		if err != nil {
			return 0, err
		}
		start := s.pos
		s.pos += i + 1
		if len(line) == 0 {
			// RFC 9112 section 2.2: ignore empty lines before the request.
			continue
		}
		if err := r.requestLine(line, start, lim); err != nil {
			return 0, err
		}
		s.lineDone = true
	}
	for {
		i := bytes.IndexByte(win[s.pos:], '\n')
		if i < 0 {
			return incomplete()
		}
		line, err := crlfLine(win, s.pos, i)
		if err != nil {
			return 0, err
		}
		start := s.pos
		s.pos += i + 1
		if len(line) == 0 {
			return s.pos, r.finish(buf)
		}
		if len(s.fields) == lim.MaxFields {
			return 0, ErrTooManyFields
		}
		f, err := parseField(line, start)
		if err != nil {
			return 0, err
		}
		s.fields = append(s.fields, f)
		if err := r.framingField(buf, f); err != nil {
			return 0, err
		}
	}
}

// crlfLine returns the line of b at [start, start+lf) without its CRLF,
// where b[start+lf] is LF.
func crlfLine(b []byte, start, lf int) ([]byte, error) {
	line := b[start : start+lf]
	if len(line) == 0 || line[len(line)-1] != '\r' {
		return nil, ErrBareLF
	}
	line = line[:len(line)-1]
	if bytes.IndexByte(line, '\r') >= 0 {
		return nil, ErrBareCR
	}
	return line, nil
}

// earlyTargetCheck refuses a request line still incomplete whose target is
// already too long, so that a client cannot make the server buffer a whole
// MaxHeadBytes of target before hearing 414.
//
// It answers as requestLine will once the line is complete, so that a head
// gets the same error however it arrives: it stays silent for a method that
// is not a token or a CR inside the line, which are refused as 400 first.
func (r *Request) earlyTargetCheck(partial []byte, lim Limits) error {
	sp := bytes.IndexByte(partial, ' ')
	if sp <= 0 || !isToken(partial[:sp]) {
		return nil
	}
	if cr := bytes.IndexByte(partial, '\r'); cr >= 0 && cr < len(partial)-1 {
		return nil
	}
	rest := partial[sp+1:]
	if end := bytes.IndexByte(rest, ' '); end >= 0 {
		rest = rest[:end]
	}
	if len(rest) > lim.MaxTargetBytes {
		return ErrURITooLong
	}
	return nil
}

// requestLine parses line, found at offset off of the buffer (RFC 9112
// section 3).
func (r *Request) requestLine(line []byte, off int, lim Limits) error {
	s := &r.st
	i := 0
	for i < len(line) && isTchar[line[i]] {
		i++
	}
	if i == 0 || i == len(line) || line[i] != ' ' {
		return ErrBadRequestLine
	}
	s.method = span{off, off + i}
	i++
	j := bytes.IndexByte(line[i:], ' ')
	if j < 0 {
		if len(line)-i > lim.MaxTargetBytes {
			return ErrURITooLong
		}
		return ErrBadRequestLine
	}
	if j == 0 {
		return ErrBadRequestLine
	}
	if j > lim.MaxTargetBytes {
		return ErrURITooLong
	}
	s.target = span{off + i, off + i + j}
	v := line[i+j+1:]
	if len(v) != len("HTTP/1.1") || string(v[:5]) != "HTTP/" || v[6] != '.' ||
		!isDigit(v[5]) || !isDigit(v[7]) {
		return ErrBadVersion
	}
	if v[5] != '1' {
		// HTTP/0.9 has no version in its request line; "HTTP/0.x" and
		// HTTP/2 and above are versions this server does not speak.
		return ErrVersionNotSupported
	}
	r.Major, r.Minor = 1, int(v[7]-'0')
	form, lo, hi, err := checkTarget(line[:i-1], line[i:i+j])
	if err != nil {
		return err
	}
	s.form, s.authority = form, span{s.target.lo + lo, s.target.lo + hi}
	return nil
}

// parseField parses a field line found at offset off (RFC 9112 section 5).
func parseField(line []byte, off int) (fieldSpan, error) {
	if line[0] == ' ' || line[0] == '\t' {
		return fieldSpan{}, ErrObsFold
	}
	i := 0
	for i < len(line) && isTchar[line[i]] {
		i++
	}
	if i == len(line) {
		return fieldSpan{}, ErrBadFieldName
	}
	switch c := line[i]; {
	case c == ' ' || c == '\t':
		return fieldSpan{}, ErrSpaceBeforeColon
	case c != ':' || i == 0:
		return fieldSpan{}, ErrBadFieldName
	}
	name := span{off, off + i}
	lo, hi := i+1, len(line)
	for lo < hi && (line[lo] == ' ' || line[lo] == '\t') {
		lo++
	}
	for hi > lo && (line[hi-1] == ' ' || line[hi-1] == '\t') {
		hi--
	}
	for _, c := range line[lo:hi] {
		if !isFieldByte[c] {
			return fieldSpan{}, ErrBadFieldValue
		}
	}
	return fieldSpan{name, span{off + lo, off + hi}}, nil
}

// framingField takes in what a field means for framing and connection
// management as soon as its line is complete.
func (r *Request) framingField(buf []byte, f fieldSpan) error {
	s := &r.st
	name, value := buf[f.name.lo:f.name.hi], buf[f.value.lo:f.value.hi]
	switch len(name) {
	case len("host"):
		if eqFold(name, "host") {
			s.hosts++
			if s.hosts > 1 || !validAuthority(value, true, false) {
				return ErrBadHost
			}
			s.host = f.value
		}
	case len("content-length"):
		if eqFold(name, "content-length") {
			return r.contentLength(buf, f.value)
		}
	case len("transfer-encoding"):
		if eqFold(name, "transfer-encoding") {
			if r.Minor == 0 {
				return ErrTransferEncodingHTTP10
			}
			r.transferEncoding(value)
		}
	case len("connection"):
		if eqFold(name, "connection") {
			forEachElement(value, func(e []byte) {
				s.connClose = s.connClose || eqFold(e, "close")
				s.connKeepAlive = s.connKeepAlive || eqFold(e, "keep-alive")
			})
		}
	case len("upgrade"):
		if eqFold(name, "upgrade") {
			forEachElement(value, func(e []byte) {
				s.upgrade = s.upgrade || len(e) > 0 && !eqFold(e, "h2c")
			})
		}
	case len("expect"):
		if eqFold(name, "expect") {
			forEachElement(value, func(e []byte) {
				if eqFold(e, "100-continue") {
					s.expectContinue = true
				} else if len(e) > 0 {
					s.expectOther = true
				}
			})
		}
	}
	return nil
}

// contentLength checks one Content-Length value: a list of 1*DIGIT, each
// the same as every one before (RFC 9110 section 8.6).
func (r *Request) contentLength(buf []byte, v span) error {
	s := &r.st
	if v.lo == v.hi {
		return ErrBadContentLength
	}
	for p := v.lo; ; {
		q := v.hi
		if end := bytes.IndexByte(buf[p:v.hi], ','); end >= 0 {
			q = p + end
		}
		lo, hi := p, q
		for lo < hi && (buf[lo] == ' ' || buf[lo] == '\t') {
			lo++
		}
		for hi > lo && (buf[hi-1] == ' ' || buf[hi-1] == '\t') {
			hi--
		}
		if lo == hi {
			return ErrBadContentLength
		}
		var n int64
		for _, c := range buf[lo:hi] {
			if !isDigit(c) || n > (math.MaxInt64-int64(c-'0'))/10 {
				return ErrBadContentLength
			}
			n = n*10 + int64(c-'0')
		}
		if !s.haveCL {
			s.haveCL, s.cl, s.clDigits = true, n, span{lo, hi}
		} else if !bytes.Equal(buf[lo:hi], buf[s.clDigits.lo:s.clDigits.hi]) {
			return ErrConflictingContentLength
		}
		if q == v.hi {
			return nil
		}
		p = q + 1
	}
}

// transferEncoding takes in one Transfer-Encoding value; the list of every
// such field is judged in finish.
func (r *Request) transferEncoding(value []byte) {
	s := &r.st
	s.te = true
	if len(value) == 0 {
		s.teBad = true
		return
	}
	for {
		end := bytes.IndexByte(value, ',')
		elem := value
		if end >= 0 {
			elem = value[:end]
		}
		elem = trimOWS(elem)
		switch {
		case !isToken(elem):
			// Empty elements and parameters: nothing to accept them for.
			s.teBad = true
		case eqFold(elem, "chunked"):
			if s.teChunked {
				s.teBad = true
			}
			s.teChunked, s.teLastIsCh = true, true
		default:
			s.teOther, s.teLastIsCh = true, false
		}
		if end < 0 {
			return
		}
		value = value[end+1:]
	}
}

// finish checks the head as a whole once its empty line is read and fills
// in r's exported fields.
func (r *Request) finish(buf []byte) error {
	s := &r.st
	if s.te {
		if s.teBad || (s.teChunked && !s.teLastIsCh) {
			return ErrBadTransferEncoding
		}
		if s.haveCL {
			return ErrContentLengthWithTransferEncoding
		}
		if s.teOther || !s.teChunked {
			return ErrUnsupportedTransferEncoding
		}
	}
	if r.Minor >= 1 && s.hosts != 1 {
		return ErrBadHost
	}
	if s.expectOther {
		return ErrExpectationFailed
	}
	r.Method = buf[s.method.lo:s.method.hi]
	r.Target = buf[s.target.lo:s.target.hi]
	r.Form = s.form
	r.Authority = buf[s.host.lo:s.host.hi]
	if s.form == AbsoluteForm || s.form == AuthorityForm {
		r.Authority = buf[s.authority.lo:s.authority.hi]
	}
	r.Fields = r.Fields[:0]
	for _, f := range s.fields {
		r.Fields = append(r.Fields, Field{buf[f.name.lo:f.name.hi], buf[f.value.lo:f.value.hi]})
	}
	r.ContentLength = -1
	r.clText = nil
	if s.haveCL {
		r.ContentLength = s.cl
		r.clText = buf[s.clDigits.lo:s.clDigits.hi]
	}
	r.Chunked = s.te
	r.Close = s.connClose || (r.Minor == 0 && !s.connKeepAlive)
	r.Continue = s.expectContinue && r.Minor >= 1
	r.Upgrade = s.upgrade
	return nil
}

// forEachElement calls f with each element of a comma-separated list (RFC
// 9110 section 5.6.1), trimmed of OWS; empty elements included.
func forEachElement(v []byte, f func([]byte)) {
	for {
		end := bytes.IndexByte(v, ',')
		if end < 0 {
			f(trimOWS(v))
			return
		}
		f(trimOWS(v[:end]))
		v = v[end+1:]
	}
}

func trimOWS(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t') {
		b = b[:len(b)-1]
	}
	return b
}

// eqFold reports whether b equals the lower-case ASCII s, ignoring case.
func eqFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range len(b) {
		c := b[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != s[i] {
			return false
		}
	}
	return true
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

func isToken(b []byte) bool {
	for _, c := range b {
		if !isTchar[c] {
			return false
		}
	}
	return len(b) > 0
}
