package h2frame

import (
	"errors"
	"strconv"
)

// ErrIncomplete reports that the buffer does not yet hold a whole frame, or
// the whole connection preface: read more, append it, and call again.
var ErrIncomplete = errors.New("h2frame: incomplete")

// An ErrCode is an HTTP/2 error code, sent in RST_STREAM and GOAWAY frames
// (RFC 9113 section 7).
type ErrCode uint32

// The error codes of RFC 9113 section 7.
const (
	CodeNoError            ErrCode = 0x0
	CodeProtocolError      ErrCode = 0x1
	CodeInternalError      ErrCode = 0x2
	CodeFlowControlError   ErrCode = 0x3
	CodeSettingsTimeout    ErrCode = 0x4
	CodeStreamClosed       ErrCode = 0x5
	CodeFrameSizeError     ErrCode = 0x6
	CodeRefusedStream      ErrCode = 0x7
	CodeCancel             ErrCode = 0x8
	CodeCompressionError   ErrCode = 0x9
	CodeConnectError       ErrCode = 0xa
	CodeEnhanceYourCalm    ErrCode = 0xb
	CodeInadequateSecurity ErrCode = 0xc
	CodeHTTP11Required     ErrCode = 0xd
)

var codeNames = [...]string{
	CodeNoError:            "NO_ERROR",
	CodeProtocolError:      "PROTOCOL_ERROR",
	CodeInternalError:      "INTERNAL_ERROR",
	CodeFlowControlError:   "FLOW_CONTROL_ERROR",
	CodeSettingsTimeout:    "SETTINGS_TIMEOUT",
	CodeStreamClosed:       "STREAM_CLOSED",
	CodeFrameSizeError:     "FRAME_SIZE_ERROR",
	CodeRefusedStream:      "REFUSED_STREAM",
	CodeCancel:             "CANCEL",
	CodeCompressionError:   "COMPRESSION_ERROR",
	CodeConnectError:       "CONNECT_ERROR",
	CodeEnhanceYourCalm:    "ENHANCE_YOUR_CALM",
	CodeInadequateSecurity: "INADEQUATE_SECURITY",
	CodeHTTP11Required:     "HTTP_1_1_REQUIRED",
}

// String returns the code's name in RFC 9113, or its hexadecimal value for
// a code the RFC does not define (which a receiver treats as
// INTERNAL_ERROR, section 7).
func (c ErrCode) String() string {
	if int(c) < len(codeNames) {
		return codeNames[c]
	}
	return "0x" + strconv.FormatUint(uint64(c), 16)
}

// Error is the type of this package's errors other than ErrIncomplete.
//
// The sentinels below are connection errors as declared; a stream error is
// returned as a copy of its sentinel naming the stream, which errors.Is
// matches against the sentinel.
type Error struct {
	code     ErrCode
	stream   uint32 // non-zero: a stream error on this stream
	msg      string
	sentinel *Error // the sentinel a stream error copies
}

func (e *Error) Error() string {
	s := "h2frame: " + e.msg + " (" + e.code.String()
	if e.stream != 0 {
		s += ", stream " + strconv.FormatUint(uint64(e.stream), 10)
	}
	return s + ")"
}

// Code returns the error code to send in GOAWAY or RST_STREAM.
func (e *Error) Code() ErrCode { return e.code }

// StreamID returns the stream to reset for a stream error, and 0 for a
// connection error (section 5.4): stream 0 is never a stream.
func (e *Error) StreamID() uint32 { return e.stream }

// Is reports whether target is the sentinel a stream error copies.
func (e *Error) Is(target error) bool {
	return e.sentinel != nil && target == error(e.sentinel)
}

// streamError returns sentinel as a stream error on stream. It allocates,
// which only an erring peer makes happen.
func streamError(sentinel *Error, stream uint32) *Error {
	return &Error{code: sentinel.code, stream: stream, msg: sentinel.msg, sentinel: sentinel}
}

// The errors of Parse and MatchPreface. Each says which kind it is
// returned as: a connection error calls for GOAWAY and closing, a stream
// error for RST_STREAM on the frame's stream.
var (
	// ErrBadPreface: the connection does not start with Preface (section
	// 3.4): connection error PROTOCOL_ERROR, for which GOAWAY may be
	// omitted. A buffer starting with an HTTP/1.1 request line gets it too,
	// for a caller detecting prior-knowledge HTTP/2 to fall back on.
	ErrBadPreface = &Error{code: CodeProtocolError, msg: "bad connection preface"}

	// ErrFrameTooLarge: a frame longer than the SETTINGS_MAX_FRAME_SIZE
	// given to Parse (section 4.2). Always a connection error
	// FRAME_SIZE_ERROR, reported as soon as the frame header has arrived,
	// so that the payload is never buffered.
	ErrFrameTooLarge = &Error{code: CodeFrameSizeError, msg: "frame larger than SETTINGS_MAX_FRAME_SIZE"}
	// ErrFrameTooShort: a DATA, HEADERS or PUSH_PROMISE frame too short
	// for the Pad Length, priority or Promised Stream ID fields its flags
	// announce (section 4.2: too small to contain mandatory frame data).
	// Connection error FRAME_SIZE_ERROR: the frame may carry a field block
	// or flow-controlled data whose accounting would be lost.
	ErrFrameTooShort = &Error{code: CodeFrameSizeError, msg: "frame too short for its fields"}
	// ErrPadding: padding as long as the rest of the payload or longer in
	// DATA, HEADERS or PUSH_PROMISE (sections 6.1, 6.2, 6.6): connection
	// error PROTOCOL_ERROR.
	ErrPadding = &Error{code: CodeProtocolError, msg: "padding exceeds payload"}
	// ErrStreamZero: DATA, HEADERS, PRIORITY, RST_STREAM, PUSH_PROMISE or
	// CONTINUATION on stream 0 (sections 6.1-6.4, 6.6, 6.10): connection
	// error PROTOCOL_ERROR.
	ErrStreamZero = &Error{code: CodeProtocolError, msg: "frame type needs a stream"}
	// ErrStreamNonZero: SETTINGS, PING or GOAWAY on a stream other than 0
	// (sections 6.5, 6.7, 6.8): connection error PROTOCOL_ERROR.
	ErrStreamNonZero = &Error{code: CodeProtocolError, msg: "connection frame on a stream"}
	// ErrSelfDependency: HEADERS or PRIORITY making a stream depend on
	// itself (RFC 7540 section 5.3.1, whose priority fields RFC 9113 still
	// parses): stream error PROTOCOL_ERROR. For HEADERS the caller must
	// still decode the field block (section 4.3): f.Data holds it.
	ErrSelfDependency = &Error{code: CodeProtocolError, msg: "stream depends on itself"}
	// ErrPriorityLength: PRIORITY not 5 bytes long (section 6.3): stream
	// error FRAME_SIZE_ERROR.
	ErrPriorityLength = &Error{code: CodeFrameSizeError, msg: "PRIORITY length not 5"}
	// ErrRSTStreamLength: RST_STREAM not 4 bytes long (section 6.4):
	// connection error FRAME_SIZE_ERROR.
	ErrRSTStreamLength = &Error{code: CodeFrameSizeError, msg: "RST_STREAM length not 4"}
	// ErrSettingsLength: SETTINGS whose length is not a multiple of 6, or
	// an ACK with a payload (section 6.5): connection error
	// FRAME_SIZE_ERROR.
	ErrSettingsLength = &Error{code: CodeFrameSizeError, msg: "bad SETTINGS length"}
	// ErrEnablePush: SETTINGS_ENABLE_PUSH other than 0 or 1 (section
	// 6.5.2): connection error PROTOCOL_ERROR.
	ErrEnablePush = &Error{code: CodeProtocolError, msg: "SETTINGS_ENABLE_PUSH not 0 or 1"}
	// ErrInitialWindowSize: SETTINGS_INITIAL_WINDOW_SIZE above 2^31-1
	// (section 6.5.2): connection error FLOW_CONTROL_ERROR.
	ErrInitialWindowSize = &Error{code: CodeFlowControlError, msg: "SETTINGS_INITIAL_WINDOW_SIZE above 2^31-1"}
	// ErrMaxFrameSize: SETTINGS_MAX_FRAME_SIZE outside [2^14, 2^24-1]
	// (section 6.5.2): connection error PROTOCOL_ERROR.
	ErrMaxFrameSize = &Error{code: CodeProtocolError, msg: "SETTINGS_MAX_FRAME_SIZE out of range"}
	// ErrPingLength: PING not 8 bytes long (section 6.7): connection error
	// FRAME_SIZE_ERROR.
	ErrPingLength = &Error{code: CodeFrameSizeError, msg: "PING length not 8"}
	// ErrGoAwayLength: GOAWAY shorter than 8 bytes (section 6.8, 4.2):
	// connection error FRAME_SIZE_ERROR.
	ErrGoAwayLength = &Error{code: CodeFrameSizeError, msg: "GOAWAY shorter than 8"}
	// ErrWindowUpdateLength: WINDOW_UPDATE not 4 bytes long (section 6.9):
	// connection error FRAME_SIZE_ERROR.
	ErrWindowUpdateLength = &Error{code: CodeFrameSizeError, msg: "WINDOW_UPDATE length not 4"}
	// ErrZeroIncrement: WINDOW_UPDATE with an increment of 0 (section 6.9):
	// PROTOCOL_ERROR, a stream error on a stream and a connection error on
	// stream 0.
	ErrZeroIncrement = &Error{code: CodeProtocolError, msg: "WINDOW_UPDATE increment 0"}
)
