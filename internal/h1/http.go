package h1

import (
	"net/http"
	"net/textproto"
	"net/url"
)

// Header returns the fields as the http.Header that net/http's server gives
// a handler in Request.Header: canonical keys, values in order, without
// Host (in Request.Host) and Transfer-Encoding (in
// Request.TransferEncoding), one Content-Length (its first value's digits)
// however many identical ones were sent, and "Cache-Control: no-cache" added for "Pragma: no-cache"
// without Cache-Control (RFC 7234 section 5.4, as net/http does).
func (r *Request) Header() http.Header {
	// Three allocations whatever the number of fields (besides the map's
	// own): the values share one string and one backing array, each
	// value a one-element slice of it with its capacity capped, so that a
	// handler's append to one cannot reach the next.
	n := 0
	for _, f := range r.Fields {
		n += len(f.Value)
	}
	n += len(r.clText)
	var small [1024]byte
	all := small[:0]
	if n > len(small) {
		all = make([]byte, 0, n)
	}
	for _, f := range r.Fields {
		all = append(all, f.Value...)
	}
	all = append(all, r.clText...)
	text := string(all)
	vals := make([]string, len(r.Fields)+1)
	h := make(http.Header, len(r.Fields))
	off := 0
	for i, f := range r.Fields {
		v := text[off : off+len(f.Value)]
		off += len(f.Value)
		k := commonKey(f.Name)
		if k == "" {
			k = textproto.CanonicalMIMEHeaderKey(string(f.Name))
		}
		switch k {
		case "Host", "Transfer-Encoding":
			continue
		case "Content-Length":
			if h[k] == nil {
				vals[len(r.Fields)] = text[len(text)-len(r.clText):]
				h[k] = vals[len(r.Fields):]
			}
			continue
		}
		if old, ok := h[k]; ok {
			h[k] = append(old, v)
			continue
		}
		vals[i] = v
		h[k] = vals[i : i+1 : i+1]
	}
	if p, ok := h["Pragma"]; ok && len(p) > 0 && p[0] == "no-cache" {
		if _, ok := h["Cache-Control"]; !ok {
			h["Cache-Control"] = []string{"no-cache"}
		}
	}
	return h
}

// commonKey returns the canonical form of the most frequent field names,
// as constants (no allocation), or "" for another name.
func commonKey(name []byte) string {
	switch len(name) {
	case 4:
		if eqFold(name, "host") {
			return "Host"
		}
	case 6:
		switch {
		case eqFold(name, "accept"):
			return "Accept"
		case eqFold(name, "cookie"):
			return "Cookie"
		case eqFold(name, "origin"):
			return "Origin"
		case eqFold(name, "pragma"):
			return "Pragma"
		}
	case 7:
		switch {
		case eqFold(name, "referer"):
			return "Referer"
		case eqFold(name, "upgrade"):
			return "Upgrade"
		}
	case 10:
		switch {
		case eqFold(name, "user-agent"):
			return "User-Agent"
		case eqFold(name, "connection"):
			return "Connection"
		}
	case 12:
		if eqFold(name, "content-type") {
			return "Content-Type"
		}
	case 13:
		switch {
		case eqFold(name, "authorization"):
			return "Authorization"
		case eqFold(name, "cache-control"):
			return "Cache-Control"
		}
	case 14:
		if eqFold(name, "content-length") {
			return "Content-Length"
		}
	case 15:
		switch {
		case eqFold(name, "accept-encoding"):
			return "Accept-Encoding"
		case eqFold(name, "accept-language"):
			return "Accept-Language"
		}
	case 17:
		if eqFold(name, "transfer-encoding") {
			return "Transfer-Encoding"
		}
	}
	return ""
}

// URL returns the request-target parsed as net/http's server does for
// Request.URL: an authority-form target becomes a URL with only Host set.
func (r *Request) URL() (*url.URL, error) {
	if r.Form == AuthorityForm {
		return &url.URL{Host: string(r.Target)}, nil
	}
	return url.ParseRequestURI(string(r.Target))
}
