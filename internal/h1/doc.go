// Package h1 parses HTTP/1.1 request heads and chunked bodies strictly,
// incrementally and without allocating.
//
// [Request.Parse] reads one request head (request line, field lines and the
// empty line) from the start of a buffer; [ChunkedDecoder.Decode] decodes a
// chunked body (RFC 9112 section 7.1) from a buffer. Both return
// [ErrIncomplete] when the buffer does not yet hold enough: the caller reads
// more, appends it and calls again, and neither rescans what it has already
// checked. Every other error is a sentinel of this package, usable with
// errors.Is, that carries the status a server should answer with
// ([Status]); the caller answers and closes the connection.
//
// # What the parser guarantees
//
// A head it accepts frames its body exactly one way: either no body, a
// Content-Length, or chunked as the only transfer coding, never two of them.
// A front proxy that reads the same bytes differently is how requests are
// smuggled (RFC 9112 section 11.2), so wherever RFC 9112 and RFC 9110 let a
// recipient choose between tolerating and refusing, this package refuses:
//
//   - Lines end in CRLF. A bare LF anywhere in the head, in a chunk line or
//     in the trailer section is refused (ErrBareLF), although RFC 9112
//     section 2.2 lets a recipient accept it, and so is a CR not followed by
//     LF (ErrBareCR). Empty lines (CRLF) before the request line are skipped,
//     as section 2.2 recommends, and count toward the head's size.
//   - The request line is exactly method SP request-target SP HTTP-version
//     (RFC 9112 section 3): one SP each, no HTAB, the method a token, the
//     version "HTTP/" DIGIT "." DIGIT, case-sensitive (section 2.3).
//     HTTP/1.0 and HTTP/1.1 are served; HTTP/1.2 to HTTP/1.9 are accepted
//     and served as 1.1 (section 2.5: a server handles a higher minor version
//     as the highest it supports), their minor reported as sent, as net/http
//     does; HTTP/0.x and HTTP/2 and above get 505 (ErrVersionNotSupported),
//     the HTTP/2 preface "PRI * HTTP/2.0" included (no prior-knowledge h2c).
//   - The request-target is one of RFC 9112 section 3.2's forms: origin-form
//     (from "/"), absolute-form with an http or https scheme and a non-empty
//     host without userinfo, authority-form host:port only for CONNECT, and
//     asterisk-form "*" only for OPTIONS. CONNECT also takes an origin-form
//     target, as net/http does for net/rpc. Bytes outside printable US-ASCII,
//     "#" (a fragment is never sent) and "%" not followed by two hex digits
//     are refused anywhere in the target (ErrBadTarget), which is stricter
//     than net/http, which takes raw bytes >= 0x80 and bad escapes in the
//     query; other printable ASCII that RFC 3986 wants encoded ("{", "|",
//     `"`...) is taken, as clients send it and net/http takes it. A target
//     longer than Limits.MaxTargetBytes gets 414 (ErrURITooLong).
//   - A field line is a token, a colon, then the value: whitespace before the
//     colon is refused (ErrSpaceBeforeColon, RFC 9112 section 5.1), so is a
//     line starting with SP or HTAB (obs-fold, section 5.2, ErrObsFold). The
//     value is trimmed of SP and HTAB at both ends and may hold HTAB, SP,
//     VCHAR and obs-text (bytes >= 0x80), nothing else: NUL, CR and the other
//     controls are refused (ErrBadFieldValue, RFC 9110 section 5.5).
//   - HTTP/1.1 needs exactly one Host field (RFC 9112 section 3.2), CONNECT
//     included; no version may send two. Host and the authority of an
//     absolute-form or authority-form target are uri-host [":" port] (RFC
//     3986 section 3.2.2, no percent-encoding). The target's authority wins
//     over Host (RFC 9112 section 3.2.2).
//   - Content-Length is 1*DIGIT within int64 (RFC 9110 section 8.6). Several
//     Content-Length fields, or a comma-separated list, are taken only if
//     every value is the same digit string; differing values get
//     ErrConflictingContentLength.
//   - Transfer-Encoding (RFC 9112 section 6.1): the codings of every
//     Transfer-Encoding field, taken as one list, must be exactly one
//     "chunked" (any case) and nothing after it. Chunked not last, twice, an
//     empty element or a parameter get ErrBadTransferEncoding (400, section
//     6.3 item 4: the length of such a request cannot be determined); a
//     well-formed list ending in chunked but with other codings before it
//     ("gzip, chunked") gets ErrUnsupportedTransferEncoding (501, RFC 9110
//     section 15.6.2: a coding the server does not implement), as does a
//     list without chunked at all ("gzip"). Transfer-Encoding on an HTTP/1.0
//     request is refused (ErrTransferEncodingHTTP10; section 6.1 lets a
//     server treat it as faulty, net/http ignores it), and Transfer-Encoding
//     with Content-Length is refused (ErrContentLengthWithTransferEncoding)
//     where net/http lets Transfer-Encoding win.
//   - Expect: "100-continue" (any case) sets Request.Continue on HTTP/1.1
//     and is ignored on HTTP/1.0 (RFC 9110 section 10.1.1); any other
//     expectation gets 417 (ErrExpectationFailed).
//
// Limits bound the head's size (431), the target's length (414) and the
// number of field lines (431); the chunked decoder bounds chunk lines, the
// trailer section and the body (413).
//
// Field values are not interpreted beyond framing, Host, Connection and
// Expect: [Request.Header] builds the net/http.Header a handler expects and
// [Request.URL] the *url.URL, both as net/http's server does.
package h1
