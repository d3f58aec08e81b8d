package httpd

import (
	"errors"
	"net/http"
	"net/textproto"
	"net/url"
	"strconv"
	"strings"

	"github.com/gracepoll/gracepoll/internal/h2frame"
	"github.com/gracepoll/gracepoll/internal/hpack"
)

// onHeaders takes a HEADERS frame: a request, or a request's trailers.
// A block not ended in this frame is gathered from the CONTINUATION
// frames that must follow it (section 6.10).
func (sc *h2conn) onHeaders(f *h2frame.Frame) bool {
	if f.Flags.Has(h2frame.FlagEndHeaders) {
		return sc.onBlock(f.Stream, f.Flags, f.Data)
	}
	if len(f.Data) > maxBlock*int(sc.cfg.maxHeaderList) {
		return sc.fail(h2frame.CodeEnhanceYourCalm, "field block too large")
	}
	sc.block = append(sc.block[:0], f.Data...)
	sc.blockStream, sc.blockFlags = f.Stream, f.Flags
	return true
}

// onContinuation adds a CONTINUATION frame's fragment to the block in
// progress: frame has checked that one is, on this stream.
func (sc *h2conn) onContinuation(f *h2frame.Frame) bool {
	if sc.blockStream == 0 {
		return sc.fail(h2frame.CodeProtocolError, "CONTINUATION without HEADERS")
	}
	if len(sc.block)+len(f.Data) > maxBlock*int(sc.cfg.maxHeaderList) {
		return sc.fail(h2frame.CodeEnhanceYourCalm, "field block too large")
	}
	if len(f.Data) == 0 && !sc.spend(1) {
		return false
	}
	sc.block = append(sc.block, f.Data...)
	if !f.Flags.Has(h2frame.FlagEndHeaders) {
		return true
	}
	id, flags := sc.blockStream, sc.blockFlags
	sc.blockStream = 0
	ok := sc.onBlock(id, flags, sc.block)
	sc.block = nil // an idle connection keeps no buffer
	return ok
}

// errListTooLarge answers a request whose fields exceed the header list
// limit (MaxHeaderBytes): 431, as net/http.
var errListTooLarge = &statusError{http.StatusRequestHeaderFieldsTooLarge, "request header fields too large"}

// onBlock decodes a complete field block and starts its request, or
// takes it as its stream's trailers. The block is decoded whatever
// happens to the stream, to keep HPACK's tables in step (section 4.3).
func (sc *h2conn) onBlock(id uint32, flags h2frame.Flags, block []byte) bool {
	frameErr := sc.blockErr
	sc.blockErr = nil
	endStream := flags.Has(h2frame.FlagEndStream)

	sc.mu.Lock()
	st := sc.streams[id]
	newStream := st == nil && id > sc.lastStream
	known, ourReset := sc.closedState(id)
	if newStream {
		sc.lastStream = id
	}
	goAway := sc.goAway
	sc.mu.Unlock()

	head, _ := sc.hc.h.heads.Get().(*h2head)
	if head == nil {
		head = new(h2head)
	}
	head.reset(!newStream)
	sc.head = head
	defer func() {
		head.reset(false) // the strings are the request's now
		sc.head = nil
		sc.hc.h.heads.Put(head)
	}()
	err := sc.dec.Decode(block, sc.emit)
	tooLarge := errors.Is(err, hpack.ErrListTooLarge)
	if err != nil && !tooLarge {
		return sc.fail(h2frame.CodeCompressionError, err.Error())
	}

	switch {
	case id%2 == 0:
		return sc.fail(h2frame.CodeProtocolError, "even stream identifier from a client")
	case st != nil:
		// Trailers (section 8.1): they end the stream.
		sc.mu.Lock()
		remoteDone := st.remoteDone
		sc.mu.Unlock()
		switch {
		case remoteDone:
			sc.resetStream(id, h2frame.CodeStreamClosed)
		case !endStream || head.bad != "" || tooLarge || frameErr != nil:
			sc.resetStream(id, h2frame.CodeProtocolError)
		default:
			sc.mu.Lock()
			st.trailers(head.header)
			sc.mu.Unlock()
		}
		return true
	case !newStream:
		switch {
		case ourReset:
			return true // sent before the client saw our RST_STREAM
		case known:
			return sc.fail(h2frame.CodeStreamClosed, "HEADERS on a closed stream")
		}
		return sc.fail(h2frame.CodeProtocolError, "stream identifier not above the last")
	case goAway:
		return true // after GOAWAY, new streams are ignored (section 6.8)
	case frameErr != nil:
		var fe *h2frame.Error
		errors.As(frameErr, &fe)
		sc.resetStream(id, fe.Code())
		return true
	case head.bad != "":
		sc.resetStream(id, h2frame.CodeProtocolError) // malformed (section 8.1.1)
		return true
	}
	sc.mu.Lock()
	full := len(sc.streams) >= int(sc.cfg.maxStreams)
	sc.mu.Unlock()
	if full {
		// Streams count until their handlers return, reset or not, so
		// that neither the client's resets (CVE-2023-44487) nor ours
		// (CVE-2025-8671) let more handlers run.
		if !sc.spend(1) {
			return false
		}
		sc.resetStream(id, h2frame.CodeRefusedStream)
		return true
	}
	sc.earn()
	r, bad := sc.newRequest(head, endStream)
	if bad != "" {
		sc.resetStream(id, h2frame.CodeProtocolError)
		return true
	}
	handler := sc.hc.h.handler
	if tooLarge {
		handler = refusal{errListTooLarge}
	}
	sc.openStream(id, r, endStream, handler)
	return true
}

// refusal answers a request with its error's status, as a handler.
type refusal struct{ err *statusError }

func (f refusal) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	http.Error(w, f.err.msg, f.err.status)
}

// newRequest builds the handler's request from a decoded head, as
// net/http's HTTP/2 server does; bad says why it is malformed.
func (sc *h2conn) newRequest(h *h2head, endStream bool) (*http.Request, string) {
	connect := h.method == "CONNECT"
	switch {
	case h.method == "":
		return nil, "no :method"
	case connect && (h.scheme != "" || h.path != "" || h.authority == ""):
		return nil, "CONNECT with :scheme or :path, or without :authority"
	case !connect && (h.scheme == "" || h.path == ""):
		return nil, "no :scheme or :path"
	}
	header := h.header
	if header == nil {
		header = make(http.Header)
	}
	if h.cookies > 1 {
		// Split for compression (section 8.2.3), joined for the handler.
		header["Cookie"] = []string{strings.Join(header["Cookie"], "; ")}
	}
	var u *url.URL
	target := h.path
	if connect {
		u, target = &url.URL{Host: h.authority}, h.authority
	} else {
		var err error
		if u, err = url.ParseRequestURI(h.path); err != nil {
			return nil, "bad :path"
		}
	}
	host := h.authority
	if host == "" {
		host = header.Get("Host")
	}
	cl := int64(-1)
	if endStream {
		cl = 0
	}
	if vs := header["Content-Length"]; len(vs) > 0 {
		n, err := strconv.ParseUint(vs[0], 10, 63)
		if err != nil {
			return nil, "bad content-length"
		}
		for _, v := range vs[1:] {
			if v != vs[0] {
				return nil, "differing content-length values"
			}
		}
		if endStream && n != 0 {
			return nil, "content-length without a body"
		}
		cl = int64(n)
	}
	var trailer http.Header
	for _, v := range header["Trailer"] {
		for _, k := range strings.Split(v, ",") {
			k = textproto.CanonicalMIMEHeaderKey(strings.TrimSpace(k))
			switch k {
			case "", "Transfer-Encoding", "Trailer", "Content-Length":
				continue // as net/http: ignored
			}
			if trailer == nil {
				trailer = make(http.Header)
			}
			trailer[k] = nil
		}
	}
	delete(header, "Trailer")
	hc := sc.hc
	ctx := &reqCtx{parent: hc.h.ctx, hc: hc}
	r0 := http.Request{
		Method:        method([]byte(h.method)),
		URL:           u,
		Proto:         "HTTP/2.0",
		ProtoMajor:    2,
		Header:        header,
		Host:          host,
		RequestURI:    target,
		RemoteAddr:    hc.remoteAddr(),
		ContentLength: cl,
		Trailer:       trailer,
	}
	if cs, ok := hc.c.ConnectionState(); ok {
		tlsState := cs
		r0.TLS = &tlsState
	}
	r := r0.WithContext(ctx)
	ctx.req = r
	return r, ""
}

// canonicalH2 returns the canonical form of a lowercase field name
// without allocating for the common ones.
func canonicalH2(k string) string {
	switch k {
	case "accept":
		return "Accept"
	case "accept-encoding":
		return "Accept-Encoding"
	case "accept-language":
		return "Accept-Language"
	case "authorization":
		return "Authorization"
	case "cache-control":
		return "Cache-Control"
	case "content-length":
		return "Content-Length"
	case "content-type":
		return "Content-Type"
	case "cookie":
		return "Cookie"
	case "host":
		return "Host"
	case "if-modified-since":
		return "If-Modified-Since"
	case "if-none-match":
		return "If-None-Match"
	case "origin":
		return "Origin"
	case "priority":
		return "Priority"
	case "referer":
		return "Referer"
	case "te":
		return "Te"
	case "trailer":
		return "Trailer"
	case "user-agent":
		return "User-Agent"
	case "grpc-timeout":
		return "Grpc-Timeout"
	case "grpc-encoding":
		return "Grpc-Encoding"
	case "grpc-accept-encoding":
		return "Grpc-Accept-Encoding"
	case "sec-fetch-dest":
		return "Sec-Fetch-Dest"
	case "sec-fetch-mode":
		return "Sec-Fetch-Mode"
	case "sec-fetch-site":
		return "Sec-Fetch-Site"
	case "upgrade-insecure-requests":
		return "Upgrade-Insecure-Requests"
	}
	return textproto.CanonicalMIMEHeaderKey(k)
}
