// Package h2frame reads and writes HTTP/2 frames (RFC 9113 sections 4 and
// 6) over byte slices, without I/O and, for valid frames, without
// allocating.
//
// [Parse] reads one frame from the start of a buffer. It returns
// [ErrIncomplete] when the buffer does not yet hold the whole frame: the
// caller reads more, appends it and calls again. A frame's payload is not
// copied: the slices of a [Frame] alias the buffer, valid until the caller
// reuses it. The Append functions ([AppendData], [AppendHeaders],
// [AppendSettings]...) append one encoded frame to a slice, as strconv's
// Append functions do, so that a connection can gather its output in one
// buffer and write it in one system call.
//
// # What the parser checks
//
// Parse checks everything a frame can be checked for on its own: its
// length against the SETTINGS_MAX_FRAME_SIZE the caller advertised, the
// stream identifier its type needs, its type's fixed payload length, its
// padding, and the values of the settings RFC 9113 defines. It does not
// know the connection's state: that a CONTINUATION follows a HEADERS
// without END_HEADERS on the same stream (section 6.10), that the first
// frame after the preface is SETTINGS (section 3.4), that a stream is in a
// state that may receive the frame (section 5.1), flow control (section
// 5.2) and field block decoding (section 4.3) are the caller's. Frames of
// an unknown type are returned unchecked, for the caller to discard
// (section 5.5); flags a type does not define are left in [Frame.Flags]
// and must be ignored (section 4.1), as is the reserved bit of a stream
// identifier.
//
// # Errors
//
// Every error other than ErrIncomplete is an [*Error] carrying the error
// code to send ([Error.Code]) and whether it is a connection error or a
// stream error (section 5.4):
//
//   - A connection error ([Error.StreamID] returns 0): the caller sends
//     GOAWAY with the code and the last stream it processed, and closes the
//     connection (section 5.4.1). Parse's other results are then
//     meaningless: framing is lost.
//   - A stream error ([Error.StreamID] returns the stream): the caller sends
//     RST_STREAM with the code on that stream (section 5.4.2) and goes on
//     with the connection after the frame: Parse returns the frame's size
//     in n and its header in f, so the caller can skip it.
//
// Each connection error is one of this package's sentinels, and each
// stream error a copy of one naming the stream: compare with errors.Is.
// Only a stream error allocates; parsing a valid frame never does.
package h2frame
