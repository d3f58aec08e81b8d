//go:build linux

package peers

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
)

// HTTPResponse is the part of an HTTP/1.1 response the benchmarks' clients
// check: status, content type and body, and the response's whole length on
// the wire.
type HTTPResponse struct {
	Status      int
	ContentType string
	Body        []byte
	Len         int // head and body
}

// errIncomplete says that a buffer holds less than one whole response.
var errIncomplete = errors.New("incomplete response")

// ParseHTTPResponse parses the first response in p, framed by its
// Content-Length: every server of the comparison frames these small
// bodies so (HTTPHandler sets it), and a client that met chunked framing
// here would be meeting a server that changed. It returns errIncomplete
// if p ends before the response does; Body aliases p.
func ParseHTTPResponse(p []byte) (HTTPResponse, error) {
	var r HTTPResponse
	end := bytes.Index(p, []byte("\r\n\r\n"))
	if end < 0 {
		if len(p) > 16<<10 {
			return r, errors.New("response head over 16 KiB")
		}
		return r, errIncomplete
	}
	head := p[:end]
	line, rest, _ := bytes.Cut(head, []byte("\r\n"))
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.1 ")) || (len(line) > 12 && line[12] != ' ') {
		return r, fmt.Errorf("status line %q", line)
	}
	status, err := strconv.Atoi(string(line[9:12]))
	if err != nil {
		return r, fmt.Errorf("status line %q", line)
	}
	r.Status = status
	length := -1
	for len(rest) > 0 {
		var field []byte
		field, rest, _ = bytes.Cut(rest, []byte("\r\n"))
		name, value, ok := bytes.Cut(field, []byte(":"))
		if !ok {
			return r, fmt.Errorf("header line %q", field)
		}
		value = bytes.TrimSpace(value)
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			n, err := strconv.Atoi(string(value))
			if err != nil || n < 0 || (length >= 0 && n != length) {
				return r, fmt.Errorf("Content-Length %q", value)
			}
			length = n
		case bytes.EqualFold(name, []byte("Content-Type")):
			r.ContentType = string(value)
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			return r, fmt.Errorf("Transfer-Encoding %q: the benchmarks expect Content-Length framing", value)
		}
	}
	if length < 0 {
		return r, errors.New("response without Content-Length")
	}
	r.Len = end + 4 + length
	if len(p) < r.Len {
		return r, errIncomplete
	}
	r.Body = p[end+4 : r.Len]
	return r, nil
}

// HTTPRoute is one route of the comparison with the answer every server
// must give it.
type HTTPRoute struct {
	Path        string // with the query
	ContentType string
	Body        string
}

// Routes of the comparison (see HTTPHandler).
var (
	RoutePlaintext = HTTPRoute{"/plaintext", "text/plain", PlaintextBody}
	RouteJSON      = HTTPRoute{"/json", "application/json", JSONBody}
)

// RouteSleep is /sleep?ms=ms.
func RouteSleep(ms int) HTTPRoute {
	return HTTPRoute{"/sleep?ms=" + strconv.Itoa(ms), "text/plain", SleepBody}
}

// Check reports whether r is route's answer: 200, its content type (a
// parameter such as "; charset=utf-8" after it is allowed) and its body
// byte for byte.
func (route HTTPRoute) Check(r HTTPResponse) error {
	ct, _, _ := bytes.Cut([]byte(r.ContentType), []byte(";"))
	switch {
	case r.Status != 200:
		return fmt.Errorf("GET %s: status %d, want 200", route.Path, r.Status)
	case string(bytes.TrimSpace(ct)) != route.ContentType:
		return fmt.Errorf("GET %s: Content-Type %q, want %q", route.Path, r.ContentType, route.ContentType)
	case string(r.Body) != route.Body:
		return fmt.Errorf("GET %s: body %q, want %q", route.Path, r.Body, route.Body)
	}
	return nil
}

// Request returns the request the benchmarks send for route to host,
// byte for byte what wrk sends (wrk.format with no headers of its own).
func (route HTTPRoute) Request(host string) []byte {
	return []byte("GET " + route.Path + " HTTP/1.1\r\nHost: " + host + "\r\n\r\n")
}
