package h1

import (
	"bytes"
	"net/netip"
)

// checkTarget returns the form of a request-target allowed for method and,
// for absolute-form and authority-form, where its authority is in t, t[lo:hi]
// (RFC 9112 section 3.2).
func checkTarget(method, t []byte) (f Form, lo, hi int, err error) {
	switch {
	case len(t) == 1 && t[0] == '*':
		// Section 3.2.4: only for a server-wide OPTIONS.
		if string(method) != "OPTIONS" {
			return 0, 0, 0, ErrBadTarget
		}
		return AsteriskForm, 0, 0, nil
	case t[0] == '/':
		if !validPathQuery(t) {
			return 0, 0, 0, ErrBadTarget
		}
		return OriginForm, 0, 0, nil
	case string(method) == "CONNECT":
		// Section 3.2.3: uri-host ":" port, the port required.
		if !validAuthority(t, false, true) {
			return 0, 0, 0, ErrBadTarget
		}
		return AuthorityForm, 0, len(t), nil
	}
	// Section 3.2.2: absolute-form. Only the schemes this server answers
	// for; their authority is required and holds no userinfo (RFC 9110
	// sections 4.2.1 and 4.2.4).
	rest := t
	switch {
	case len(rest) >= 7 && eqFold(rest[:7], "http://"):
		rest = rest[7:]
	case len(rest) >= 8 && eqFold(rest[:8], "https://"):
		rest = rest[8:]
	default:
		return 0, 0, 0, ErrBadTarget
	}
	end := bytes.IndexAny(rest, "/?")
	if end < 0 {
		end = len(rest)
	}
	auth := rest[:end]
	if !validAuthority(auth, false, false) || !validPathQuery(rest[end:]) {
		return 0, 0, 0, ErrBadTarget
	}
	return AbsoluteForm, len(t) - len(rest), len(t) - len(rest) + end, nil
}

// validPathQuery reports whether b is path and query characters of RFC
// 3986, percent-encoding well-formed, leniently: the printable ASCII that
// RFC 3986 wants encoded but clients send raw is accepted, except "#".
func validPathQuery(b []byte) bool {
	for i := 0; i < len(b); i++ {
		c := b[i]
		if c == '%' {
			if i+2 >= len(b) || !isHex(b[i+1]) || !isHex(b[i+2]) {
				return false
			}
			i += 2
			continue
		}
		if c <= ' ' || c >= 0x7f || c == '#' {
			return false
		}
	}
	return true
}

// validAuthority reports whether b is uri-host [":" port] (RFC 3986 section
// 3.2.2-3.2.3) without percent-encoding, IPvFuture or IPv6 zones. A port
// may be empty unless needPort.
func validAuthority(b []byte, allowEmpty, needPort bool) bool {
	if len(b) == 0 {
		return allowEmpty
	}
	var port []byte
	if b[0] == '[' {
		end := bytes.IndexByte(b, ']')
		if end < 2 {
			return false
		}
		for _, c := range b[1:end] {
			if !isHex(c) && c != ':' && c != '.' {
				return false
			}
		}
		// An IPv6address (RFC 3986 section 3.2.2), as net/url checks it.
		if a, err := netip.ParseAddr(string(b[1:end])); err != nil || !a.Is6() {
			return false
		}
		switch rest := b[end+1:]; {
		case len(rest) == 0:
			return !needPort
		case rest[0] != ':':
			return false
		default:
			port = rest[1:]
		}
	} else {
		host := b
		if i := bytes.LastIndexByte(b, ':'); i >= 0 {
			host, port = b[:i], b[i+1:]
		} else if needPort {
			return false
		}
		if len(host) == 0 {
			return false
		}
		for _, c := range host {
			if !isRegName[c] {
				return false
			}
		}
	}
	if needPort && len(port) == 0 {
		return false
	}
	for _, c := range port {
		if !isDigit(c) {
			return false
		}
	}
	return true
}

func isHex(c byte) bool {
	return isDigit(c) || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// Byte classes, read-only after initialisation.
var (
	// isTchar: RFC 9110 section 5.6.2's tchar.
	isTchar = byteClass(func(c byte) bool {
		return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || isDigit(c) ||
			bytes.IndexByte([]byte("!#$%&'*+-.^_`|~"), c) >= 0
	})
	// isFieldByte: RFC 9110 section 5.5's field-vchar, SP and HTAB.
	isFieldByte = byteClass(func(c byte) bool {
		return c == '\t' || ' ' <= c && c != 0x7f
	})
	// isRegName: RFC 3986's unreserved and sub-delims.
	isRegName = byteClass(func(c byte) bool {
		return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || isDigit(c) ||
			bytes.IndexByte([]byte("-._~!$&'()*+,;="), c) >= 0
	})
)

func byteClass(in func(byte) bool) (t [256]bool) {
	for c := range 256 {
		t[c] = in(byte(c))
	}
	return t
}
