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
	h := make(http.Header, len(r.Fields))
	for _, f := range r.Fields {
		k := textproto.CanonicalMIMEHeaderKey(string(f.Name))
		switch k {
		case "Host", "Transfer-Encoding":
			continue
		case "Content-Length":
			if h[k] == nil {
				h[k] = []string{string(r.clText)}
			}
			continue
		}
		h[k] = append(h[k], string(f.Value))
	}
	if p, ok := h["Pragma"]; ok && len(p) > 0 && p[0] == "no-cache" {
		if _, ok := h["Cache-Control"]; !ok {
			h["Cache-Control"] = []string{"no-cache"}
		}
	}
	return h
}

// URL returns the request-target parsed as net/http's server does for
// Request.URL: an authority-form target becomes a URL with only Host set.
func (r *Request) URL() (*url.URL, error) {
	if r.Form == AuthorityForm {
		return &url.URL{Host: string(r.Target)}, nil
	}
	return url.ParseRequestURI(string(r.Target))
}
