package h2frame

// Preface is the client connection preface (RFC 9113 section 3.4), which
// a server reads before the client's first SETTINGS frame.
const Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// MatchPreface checks that buf starts with Preface. It returns
// len(Preface) if it does; ErrIncomplete if buf is a proper prefix of it;
// and ErrBadPreface as soon as a byte differs, as for an HTTP/1.1 request
// line, on which a caller serving both versions falls back to HTTP/1.1.
func MatchPreface(buf []byte) (int, error) {
	n := min(len(buf), len(Preface))
	if string(buf[:n]) != Preface[:n] {
		return 0, ErrBadPreface
	}
	if n < len(Preface) {
		return 0, ErrIncomplete
	}
	return n, nil
}

// appendHeader appends a frame header (section 4.1). The Append
// functions are for a well-behaved sender, so a length beyond 24 bits or
// a stream identifier using the reserved bit is a bug of the caller, who
// must also keep to the peer's SETTINGS_MAX_FRAME_SIZE: it panics.
func appendHeader(dst []byte, length int, t Type, flags Flags, stream uint32) []byte {
	if length < 0 || length > MaxFrameSizeLimit {
		panic("h2frame: frame payload longer than 2^24-1")
	}
	if stream > 1<<31-1 {
		panic("h2frame: stream identifier above 2^31-1")
	}
	return append(dst, byte(length>>16), byte(length>>8), byte(length), byte(t), byte(flags),
		byte(stream>>24), byte(stream>>16), byte(stream>>8), byte(stream))
}

func append32(dst []byte, v uint32) []byte {
	return append(dst, byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
}

// AppendFrameHeader appends the header of a frame whose payload the
// caller appends next: for DATA written in place, say, or a type this
// package does not write. It panics on a length above MaxFrameSizeLimit
// or a stream above 2^31-1.
func AppendFrameHeader(dst []byte, length int, t Type, flags Flags, stream uint32) []byte {
	return appendHeader(dst, length, t, flags, stream)
}

// AppendData appends a DATA frame (section 6.1), unpadded. stream must be
// non-zero.
func AppendData(dst []byte, stream uint32, endStream bool, data []byte) []byte {
	var fl Flags
	if endStream {
		fl = FlagEndStream
	}
	dst = appendHeader(dst, len(data), TypeData, fl, stream)
	return append(dst, data...)
}

// AppendHeaders appends a HEADERS frame (section 6.2), unpadded and
// without priority fields, carrying a field block fragment. Unless
// endHeaders is set, CONTINUATION frames on the same stream must follow
// it with nothing in between (section 6.10).
func AppendHeaders(dst []byte, stream uint32, endStream, endHeaders bool, fragment []byte) []byte {
	var fl Flags
	if endStream {
		fl |= FlagEndStream
	}
	if endHeaders {
		fl |= FlagEndHeaders
	}
	dst = appendHeader(dst, len(fragment), TypeHeaders, fl, stream)
	return append(dst, fragment...)
}

// AppendContinuation appends a CONTINUATION frame (section 6.10) carrying
// the next fragment of a field block.
func AppendContinuation(dst []byte, stream uint32, endHeaders bool, fragment []byte) []byte {
	var fl Flags
	if endHeaders {
		fl = FlagEndHeaders
	}
	dst = appendHeader(dst, len(fragment), TypeContinuation, fl, stream)
	return append(dst, fragment...)
}

// AppendSettings appends a SETTINGS frame (section 6.5) carrying
// settings, in order.
func AppendSettings(dst []byte, settings ...Setting) []byte {
	dst = appendHeader(dst, 6*len(settings), TypeSettings, 0, 0)
	for _, s := range settings {
		dst = append(dst, byte(s.ID>>8), byte(s.ID))
		dst = append32(dst, s.Value)
	}
	return dst
}

// AppendSettingsAck appends a SETTINGS frame acknowledging the peer's
// (section 6.5.3).
func AppendSettingsAck(dst []byte) []byte {
	return appendHeader(dst, 0, TypeSettings, FlagAck, 0)
}

// AppendPing appends a PING frame (section 6.7); an answer to a PING
// sets ack and carries the same data.
func AppendPing(dst []byte, ack bool, data [8]byte) []byte {
	var fl Flags
	if ack {
		fl = FlagAck
	}
	dst = appendHeader(dst, 8, TypePing, fl, 0)
	return append(dst, data[:]...)
}

// AppendGoAway appends a GOAWAY frame (section 6.8): lastStream is the
// highest stream the sender processed or might process, debug opaque
// data for diagnostics.
func AppendGoAway(dst []byte, lastStream uint32, code ErrCode, debug []byte) []byte {
	dst = appendHeader(dst, 8+len(debug), TypeGoAway, 0, 0)
	dst = append32(dst, lastStream&(1<<31-1))
	dst = append32(dst, uint32(code))
	return append(dst, debug...)
}

// AppendRSTStream appends an RST_STREAM frame (section 6.4).
func AppendRSTStream(dst []byte, stream uint32, code ErrCode) []byte {
	dst = appendHeader(dst, 4, TypeRSTStream, 0, stream)
	return append32(dst, uint32(code))
}

// AppendWindowUpdate appends a WINDOW_UPDATE frame (section 6.9), for the
// connection if stream is 0. An increment of 0 or above MaxWindowSize is
// a protocol violation the caller must not commit: it panics.
func AppendWindowUpdate(dst []byte, stream, increment uint32) []byte {
	if increment == 0 || increment > MaxWindowSize {
		panic("h2frame: WINDOW_UPDATE increment not in [1, 2^31-1]")
	}
	dst = appendHeader(dst, 4, TypeWindowUpdate, 0, stream)
	return append32(dst, increment)
}
