package h1

import "errors"

// ErrIncomplete reports that the buffer does not yet hold a complete head,
// chunk line or trailer section: read more, append it, and call again.
var ErrIncomplete = errors.New("h1: incomplete")

// Error is the type of this package's errors other than ErrIncomplete. Each
// is a sentinel: compare with errors.Is.
type Error struct {
	status int
	msg    string
}

func (e *Error) Error() string { return "h1: " + e.msg }

// Status returns the HTTP status a server should answer with.
func (e *Error) Status() int { return e.status }

// The errors of a request head. The 400s are split so that tests and logs
// can tell each smuggling vector apart.
var (
	// ErrHeaderTooLarge: the head is longer than Limits.MaxHeadBytes, or a
	// trailer section longer than ChunkedDecoder.MaxTrailerBytes (RFC 6585
	// section 5).
	ErrHeaderTooLarge = &Error{431, "request head too large"}
	// ErrTooManyFields: more field lines than Limits.MaxFields.
	ErrTooManyFields = &Error{431, "too many header fields"}
	// ErrURITooLong: the request-target is longer than Limits.MaxTargetBytes
	// (RFC 9112 section 3).
	ErrURITooLong = &Error{414, "request-target too long"}

	// ErrBareLF: a line ends in LF without CR.
	ErrBareLF = &Error{400, "bare LF"}
	// ErrBareCR: a CR not followed by LF.
	ErrBareCR = &Error{400, "bare CR"}
	// ErrBadRequestLine: the request line is not method SP target SP version.
	ErrBadRequestLine = &Error{400, "malformed request line"}
	// ErrBadTarget: the request-target is not of a form the method allows.
	ErrBadTarget = &Error{400, "malformed request-target"}
	// ErrBadVersion: the version is not HTTP/DIGIT.DIGIT.
	ErrBadVersion = &Error{400, "malformed HTTP version"}
	// ErrObsFold: a field line starts with SP or HTAB (RFC 9112 section 5.2).
	ErrObsFold = &Error{400, "obsolete line folding"}
	// ErrSpaceBeforeColon: whitespace in a field name or before its colon
	// (RFC 9112 section 5.1).
	ErrSpaceBeforeColon = &Error{400, "whitespace before colon"}
	// ErrBadFieldName: a field name that is empty or not a token, or a line
	// without a colon.
	ErrBadFieldName = &Error{400, "malformed field name"}
	// ErrBadFieldValue: a field value holding NUL or another control byte.
	ErrBadFieldValue = &Error{400, "malformed field value"}
	// ErrBadHost: no Host in HTTP/1.1, more than one, or a malformed one.
	ErrBadHost = &Error{400, "missing, repeated or malformed Host"}
	// ErrBadContentLength: a Content-Length that is not 1*DIGIT in int64.
	ErrBadContentLength = &Error{400, "malformed Content-Length"}
	// ErrConflictingContentLength: Content-Length values that differ.
	ErrConflictingContentLength = &Error{400, "conflicting Content-Length"}
	// ErrContentLengthWithTransferEncoding: both framings in one request
	// (RFC 9112 section 6.3 item 3).
	ErrContentLengthWithTransferEncoding = &Error{400, "both Content-Length and Transfer-Encoding"}
	// ErrBadTransferEncoding: chunked not the final coding, repeated, or a
	// malformed coding list (RFC 9112 section 6.3 item 4).
	ErrBadTransferEncoding = &Error{400, "malformed Transfer-Encoding"}
	// ErrTransferEncodingHTTP10: Transfer-Encoding in an HTTP/1.0 request
	// (RFC 9112 section 6.1).
	ErrTransferEncodingHTTP10 = &Error{400, "Transfer-Encoding in HTTP/1.0"}
	// ErrUnsupportedTransferEncoding: a transfer coding other than chunked.
	ErrUnsupportedTransferEncoding = &Error{501, "unsupported transfer coding"}
	// ErrVersionNotSupported: a version other than HTTP/1.x.
	ErrVersionNotSupported = &Error{505, "HTTP version not supported"}
	// ErrExpectationFailed: an Expect other than 100-continue (RFC 9110
	// section 10.1.1).
	ErrExpectationFailed = &Error{417, "unsupported expectation"}
)

// The errors of a chunked body.
var (
	// ErrBadChunkSize: a chunk-size that is empty, not hex, longer than 16
	// digits or beyond int64.
	ErrBadChunkSize = &Error{400, "malformed chunk size"}
	// ErrBadChunkExtension: a chunk extension outside RFC 9112 section
	// 7.1.1's grammar.
	ErrBadChunkExtension = &Error{400, "malformed chunk extension"}
	// ErrChunkLineTooLong: a chunk line longer than
	// ChunkedDecoder.MaxLineBytes.
	ErrChunkLineTooLong = &Error{400, "chunk line too long"}
	// ErrBadChunkData: chunk data not followed by CRLF.
	ErrBadChunkData = &Error{400, "chunk data not followed by CRLF"}
	// ErrBodyTooLarge: the body is longer than ChunkedDecoder.MaxBodyBytes.
	ErrBodyTooLarge = &Error{413, "request body too large"}
)

// Status returns the HTTP status code a server should answer err with: the
// code an error in err's chain carries (an error of this package, or any
// with a Status() int method), 0 for nil and ErrIncomplete (no answer
// yet), and 500 for any other error.
func Status(err error) int {
	if err == nil || errors.Is(err, ErrIncomplete) {
		return 0
	}
	var e interface{ Status() int }
	if errors.As(err, &e) {
		return e.Status()
	}
	return 500
}
