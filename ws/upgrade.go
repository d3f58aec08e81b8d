package ws

import (
	"compress/flate"
	"crypto/sha1"
	"encoding/base64"
	"errors"
	"fmt"
	"log"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/gracepoll/gracepoll/httpd"
)

// Upgrader accepts WebSocket connections on an httpd.Server: it answers
// the opening handshake (RFC 6455 section 4.2) of an HTTP request and
// hands the connection to a Handler. The zero value, with a Handler,
// accepts same-origin requests without compression. Set its fields
// before first use and do not change them after: the connections it
// accepted read them.
type Upgrader struct {
	// Handler serves the connections ServeHTTP accepts.
	Handler Handler
	// Subprotocols are the application protocols the server speaks, in
	// its order of preference: the first one the client also offers
	// (Sec-WebSocket-Protocol) is agreed. None: no subprotocol is.
	Subprotocols []string
	// CheckOrigin reports whether a request's Origin may connect. nil
	// accepts a request without Origin (not from a browser) and one whose
	// Origin's host is the request's Host, so that another site's page
	// cannot connect with the user's cookies (cross-site WebSocket
	// hijacking). A refused request is answered 403.
	CheckOrigin func(r *http.Request) bool
	// Compression agrees permessage-deflate (RFC 7692) when the client
	// offers it. Messages from 64 bytes on are then sent compressed, each
	// on its own; see ContextTakeover for the messages received.
	Compression bool
	// ContextTakeover lets the client compress each message against the
	// ones before it (better for many small similar messages), at the
	// cost of the last 32 KiB received kept per connection while it is
	// open. Without it the server declares client_no_context_takeover and
	// keeps nothing between messages.
	ContextTakeover bool
	// CompressionLevel is the flate level of messages sent compressed,
	// flate.BestSpeed (1) to flate.BestCompression (9); 0 means
	// flate.BestSpeed.
	CompressionLevel int
	// MaxMessageSize bounds a message received, reassembled from its
	// fragments and, if compressed, after inflating (and before, with a
	// sixty-fourth more for what DEFLATE adds to incompressible data): the
	// connection is failed with 1009 beyond it. It is the most memory a
	// message in progress takes; 0 means DefaultMaxMessageSize.
	MaxMessageSize int64
	// PingInterval, if set, pings a connection that has been idle (no
	// input taken, no output sent) this long, and resets it when another
	// interval passes with nothing received (ErrPingTimeout).
	PingInterval time.Duration
	// CloseTimeout bounds the wait for the peer's close frame after ours
	// (Conn.Close): the connection is then reset (ErrCloseTimeout); 0
	// means DefaultCloseTimeout.
	CloseTimeout time.Duration

	comp   compressors
	decomp decompressors
	bufs   bufPool
}

// ServeHTTP upgrades the request for u.Handler. Mounted on a server other
// than httpd.Server it answers 500 and logs why (ErrNotHttpd), to the
// server's ErrorLog or the log package's standard logger: there is no
// caller to return the error to.
func (u *Upgrader) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if _, err := u.Upgrade(w, r, u.Handler); errors.Is(err, ErrNotHttpd) {
		logf(r, "%v", err)
	}
}

// acceptGUID is the key suffix of RFC 6455 section 1.3.
const acceptGUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

// acceptKey is Sec-WebSocket-Accept for a client's key.
func acceptKey(key string) string {
	h := sha1.New()
	h.Write([]byte(key))
	h.Write([]byte(acceptGUID))
	var sum [sha1.Size]byte
	var b64 [28]byte // base64 of 20 bytes
	base64.StdEncoding.Encode(b64[:], h.Sum(sum[:0]))
	return string(b64[:])
}

// Upgrade answers r's opening handshake and hands the connection to h,
// whose OnOpen runs before Upgrade returns; messages are delivered once
// the HTTP handler that called Upgrade returns. w must be an
// httpd.Server's (after unwrapping as http.ResponseController does): on
// net/http's http.Server, or with any other ResponseWriter, a valid
// handshake is answered 500, its body saying so, and Upgrade returns an
// error matching ErrNotHttpd.
//
// A request that is not a valid handshake is answered 400 (or 426 for a
// version other than 13) and Upgrade returns an error matching
// ErrBadHandshake; a refused origin is answered 403 (ErrOrigin). Nothing
// is written after another error from httpd.Switch (http.ErrHijacked
// after Hijack or once the response has begun, or the connection's).
func (u *Upgrader) Upgrade(w http.ResponseWriter, r *http.Request, h Handler) (*Conn, error) {
	if h == nil || u.MaxMessageSize < 0 || u.PingInterval < 0 || u.CloseTimeout < 0 ||
		u.CompressionLevel < 0 || u.CompressionLevel > flate.BestCompression {
		http.Error(w, "websocket: server misconfigured", http.StatusInternalServerError)
		return nil, fmt.Errorf("%w: Upgrader (nil Handler, or a negative or out-of-range field)", ErrInvalid)
	}
	bad := func(status int, why string) (*Conn, error) {
		http.Error(w, "websocket: "+why, status)
		return nil, fmt.Errorf("%w: %s", ErrBadHandshake, why)
	}
	switch {
	case r.Method != http.MethodGet:
		return bad(http.StatusMethodNotAllowed, "the handshake's method must be GET")
	case !r.ProtoAtLeast(1, 1):
		return bad(http.StatusBadRequest, "the handshake needs HTTP/1.1")
	case !headerHasToken(r.Header, "Connection", "upgrade"):
		return bad(http.StatusBadRequest, `no "Upgrade" in Connection`)
	case !headerHasToken(r.Header, "Upgrade", "websocket"):
		return bad(http.StatusBadRequest, `no "websocket" in Upgrade`)
	}
	if v := r.Header.Values("Sec-Websocket-Version"); len(v) != 1 || v[0] != "13" {
		w.Header().Set("Sec-WebSocket-Version", "13")
		return bad(http.StatusUpgradeRequired, "unsupported Sec-WebSocket-Version (13 is)")
	}
	keys := r.Header.Values("Sec-Websocket-Key")
	if len(keys) != 1 {
		return bad(http.StatusBadRequest, "want one Sec-WebSocket-Key")
	}
	if !validKey(keys[0]) {
		return bad(http.StatusBadRequest, "Sec-WebSocket-Key is not 16 bytes in base64")
	}
	check := u.CheckOrigin
	if check == nil {
		check = sameOrigin
	}
	if !check(r) {
		http.Error(w, "websocket: origin not allowed", http.StatusForbidden)
		return nil, fmt.Errorf("%w: %q", ErrOrigin, r.Header.Get("Origin"))
	}
	wc := &Conn{u: u, h: h}
	hdr := w.Header()
	hdr["Upgrade"] = []string{"websocket"}
	hdr["Connection"] = []string{"Upgrade"}
	hdr["Sec-Websocket-Accept"] = []string{acceptKey(keys[0])}
	if p := u.subprotocol(r); p != "" {
		wc.subprotocol = p
		hdr["Sec-Websocket-Protocol"] = []string{p}
	}
	if u.Compression {
		if params, ok := u.negotiate(r); ok {
			wc.deflate = true
			wc.huffman = params.serverBits < 15
			wc.takeover = !params.clientNoTakeover
			hdr["Sec-Websocket-Extensions"] = []string{params.answer()}
		}
	}
	wc.opening.Lock()
	defer wc.opening.Unlock()
	c, err := httpd.Switch(w, (*proto)(wc))
	if errors.Is(err, httpd.ErrNotUpgrade) {
		// httpd lets every valid handshake switch, so w is not its, and
		// Switch wrote nothing. Left alone, the server would answer 200
		// with the fields above and no body, which clients report only
		// as an unexpected status.
		for _, k := range handshakeFields {
			delete(hdr, k)
		}
		e := notHttpd(w, r)
		http.Error(w, e.msg, http.StatusInternalServerError)
		return nil, e
	}
	if err != nil {
		return nil, err
	}
	wc.c = c
	h.OnOpen(wc)
	return wc, nil
}

// handshakeFields are the header fields Upgrade sets for the 101.
var handshakeFields = []string{"Upgrade", "Connection", "Sec-Websocket-Accept", "Sec-Websocket-Protocol", "Sec-Websocket-Extensions"}

// notHttpdError is Upgrade's error for a ResponseWriter that is not an
// httpd.Server's. It matches httpd.ErrNotUpgrade too, what httpd.Switch
// returns for such a ResponseWriter.
type notHttpdError struct{ msg string }

func (e *notHttpdError) Error() string   { return e.msg }
func (e *notHttpdError) Unwrap() []error { return []error{ErrNotHttpd, httpd.ErrNotUpgrade} }

// notHttpd says what served r instead of an httpd.Server.
func notHttpd(w http.ResponseWriter, r *http.Request) *notHttpdError {
	if _, ok := r.Context().Value(http.ServerContextKey).(*http.Server); ok {
		return &notHttpdError{ErrNotHttpd.Error() + "; this is net/http's"}
	}
	return &notHttpdError{fmt.Sprintf("%v's ResponseWriter (or one whose Unwrap method returns it); this is a %T", ErrNotHttpd, w)}
}

// logf logs to the ErrorLog of the server that serves r, if it has one,
// or to the log package's standard logger.
func logf(r *http.Request, format string, args ...any) {
	var l *log.Logger
	switch s := r.Context().Value(http.ServerContextKey).(type) {
	case *http.Server:
		l = s.ErrorLog
	case *httpd.Server:
		l = s.ErrorLog
	}
	if l == nil {
		l = log.Default()
	}
	l.Printf(format, args...)
}

// negotiate picks the first permessage-deflate offer it can accept and
// settles its parameters.
func (u *Upgrader) negotiate(r *http.Request) (deflateParams, bool) {
	exts, ok := parseExtensions(r.Header.Values("Sec-Websocket-Extensions"))
	if !ok {
		return deflateParams{}, false
	}
	for _, e := range exts {
		if e.name != deflateName {
			continue
		}
		p, ok := deflateOffer(e)
		if !ok {
			continue
		}
		if !u.ContextTakeover {
			p.clientNoTakeover = true
		}
		p.serverNoTakeover = true
		return p, true
	}
	return deflateParams{}, false
}

// subprotocol is the first of u.Subprotocols that the client offers.
func (u *Upgrader) subprotocol(r *http.Request) string {
	var offered []string
	for _, v := range r.Header.Values("Sec-Websocket-Protocol") {
		for _, p := range strings.Split(v, ",") {
			offered = append(offered, strings.TrimSpace(p))
		}
	}
	for _, s := range u.Subprotocols {
		for _, o := range offered {
			if o == s {
				return s
			}
		}
	}
	return ""
}

// sameOrigin accepts a request without Origin, or whose Origin's host is
// its Host.
func sameOrigin(r *http.Request) bool {
	o := r.Header.Get("Origin")
	if o == "" {
		return true
	}
	ou, err := url.Parse(o)
	return err == nil && strings.EqualFold(ou.Host, r.Host)
}

// validKey reports whether a Sec-WebSocket-Key is 16 bytes in base64
// (RFC 6455, section 4.1).
func validKey(k string) bool {
	var b [18]byte // DecodedLen of 24 characters, padding included
	if len(k) != 24 {
		return false
	}
	n, err := base64.StdEncoding.Decode(b[:], []byte(k))
	return err == nil && n == 16
}

// headerHasToken reports whether a comma-separated field lists token, in
// any case.
func headerHasToken(h http.Header, key, token string) bool {
	for _, v := range h.Values(key) {
		for t := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

func (u *Upgrader) maxMessage() int64 {
	if u.MaxMessageSize > 0 {
		return u.MaxMessageSize
	}
	return DefaultMaxMessageSize
}

func (u *Upgrader) closeTimeout() time.Duration {
	if u.CloseTimeout > 0 {
		return u.CloseTimeout
	}
	return DefaultCloseTimeout
}

func (u *Upgrader) level() int {
	if u.CompressionLevel > 0 {
		return u.CompressionLevel
	}
	return flate.BestSpeed
}
