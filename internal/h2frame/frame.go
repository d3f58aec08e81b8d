package h2frame

import "strconv"

// HeaderLen is the length of a frame header (RFC 9113 section 4.1).
const HeaderLen = 9

// Frame size limits (section 4.2): every endpoint takes frames of
// DefaultMaxFrameSize; SETTINGS_MAX_FRAME_SIZE may raise that up to
// MaxFrameSizeLimit, the largest 24-bit length.
const (
	DefaultMaxFrameSize = 1 << 14
	MaxFrameSizeLimit   = 1<<24 - 1
)

// MaxWindowSize is the largest flow-control window (section 6.9.1).
const MaxWindowSize = 1<<31 - 1

// A Type is a frame type (section 6).
type Type uint8

// The frame types of RFC 9113 section 6.
const (
	TypeData         Type = 0x0
	TypeHeaders      Type = 0x1
	TypePriority     Type = 0x2
	TypeRSTStream    Type = 0x3
	TypeSettings     Type = 0x4
	TypePushPromise  Type = 0x5
	TypePing         Type = 0x6
	TypeGoAway       Type = 0x7
	TypeWindowUpdate Type = 0x8
	TypeContinuation Type = 0x9
)

var typeNames = [...]string{
	TypeData:         "DATA",
	TypeHeaders:      "HEADERS",
	TypePriority:     "PRIORITY",
	TypeRSTStream:    "RST_STREAM",
	TypeSettings:     "SETTINGS",
	TypePushPromise:  "PUSH_PROMISE",
	TypePing:         "PING",
	TypeGoAway:       "GOAWAY",
	TypeWindowUpdate: "WINDOW_UPDATE",
	TypeContinuation: "CONTINUATION",
}

// String returns the type's name in RFC 9113, or a hexadecimal value for
// an unknown type.
func (t Type) String() string {
	if int(t) < len(typeNames) {
		return typeNames[t]
	}
	return "UNKNOWN_0x" + strconv.FormatUint(uint64(t), 16)
}

// Flags are a frame's flags; their meaning depends on its type.
type Flags uint8

// The flags of RFC 9113 section 6.
const (
	FlagEndStream  Flags = 0x1  // DATA, HEADERS
	FlagAck        Flags = 0x1  // SETTINGS, PING
	FlagEndHeaders Flags = 0x4  // HEADERS, PUSH_PROMISE, CONTINUATION
	FlagPadded     Flags = 0x8  // DATA, HEADERS, PUSH_PROMISE
	FlagPriority   Flags = 0x20 // HEADERS
)

// Has reports whether all of v's bits are set in f.
func (f Flags) Has(v Flags) bool { return f&v == v }

// A SettingID identifies a setting (section 6.5.2).
type SettingID uint16

// The settings of RFC 9113 section 6.5.2.
const (
	SettingHeaderTableSize      SettingID = 0x1
	SettingEnablePush           SettingID = 0x2
	SettingMaxConcurrentStreams SettingID = 0x3
	SettingInitialWindowSize    SettingID = 0x4
	SettingMaxFrameSize         SettingID = 0x5
	SettingMaxHeaderListSize    SettingID = 0x6
)

var settingNames = [...]string{
	SettingHeaderTableSize:      "HEADER_TABLE_SIZE",
	SettingEnablePush:           "ENABLE_PUSH",
	SettingMaxConcurrentStreams: "MAX_CONCURRENT_STREAMS",
	SettingInitialWindowSize:    "INITIAL_WINDOW_SIZE",
	SettingMaxFrameSize:         "MAX_FRAME_SIZE",
	SettingMaxHeaderListSize:    "MAX_HEADER_LIST_SIZE",
}

// String returns the setting's name without its SETTINGS_ prefix, or a
// hexadecimal value for a setting RFC 9113 does not define.
func (s SettingID) String() string {
	if s != 0 && int(s) < len(settingNames) {
		return settingNames[s]
	}
	return "UNKNOWN_0x" + strconv.FormatUint(uint64(s), 16)
}

// A Setting is one parameter of a SETTINGS frame.
type Setting struct {
	ID    SettingID
	Value uint32
}

// check returns the error a setting's value is (section 6.5.2), nil if
// none. Settings RFC 9113 does not define are not checked: the receiver
// ignores them.
func (s Setting) check() error {
	switch s.ID {
	case SettingEnablePush:
		if s.Value > 1 {
			return ErrEnablePush
		}
	case SettingInitialWindowSize:
		if s.Value > MaxWindowSize {
			return ErrInitialWindowSize
		}
	case SettingMaxFrameSize:
		if s.Value < DefaultMaxFrameSize || s.Value > MaxFrameSizeLimit {
			return ErrMaxFrameSize
		}
	}
	return nil
}

// A Frame is one parsed frame. Its slices alias the buffer given to Parse.
type Frame struct {
	Type  Type
	Flags Flags
	// Length is the payload's length as sent, padding included: DATA
	// counts whole against flow control (section 6.9.1).
	Length uint32
	// Stream is the stream identifier, its reserved bit cleared (section
	// 4.1).
	Stream uint32

	// Data is, by type:
	//   - DATA: the data, without padding;
	//   - HEADERS, PUSH_PROMISE, CONTINUATION: the field block fragment,
	//     without padding and priority fields;
	//   - PRIORITY: the 5-byte payload, which RFC 9113 deprecates (section
	//     5.3.2) and a receiver may ignore;
	//   - SETTINGS: the parameters, 6 bytes each, read with NumSettings and
	//     Setting;
	//   - PING: the 8 bytes of opaque data;
	//   - GOAWAY: the additional debug data;
	//   - RST_STREAM, WINDOW_UPDATE: nil;
	//   - an unknown type: the whole payload.
	Data []byte

	// ErrCode is the error code of RST_STREAM and GOAWAY.
	ErrCode ErrCode
	// LastStream is GOAWAY's Last-Stream-ID, reserved bit cleared.
	LastStream uint32
	// Promised is PUSH_PROMISE's Promised Stream ID, reserved bit cleared.
	Promised uint32
	// Increment is WINDOW_UPDATE's Window Size Increment, reserved bit
	// cleared.
	Increment uint32
}

// NumSettings returns the number of parameters in a SETTINGS frame.
func (f *Frame) NumSettings() int { return len(f.Data) / 6 }

// Setting returns the i'th parameter of a SETTINGS frame. A frame may
// repeat a setting: the last one counts (section 6.5.3).
func (f *Frame) Setting(i int) Setting {
	p := f.Data[i*6 : i*6+6]
	return Setting{ID: SettingID(u16(p)), Value: u32(p[2:])}
}

func u16(p []byte) uint16 { return uint16(p[0])<<8 | uint16(p[1]) }

func u32(p []byte) uint32 {
	return uint32(p[0])<<24 | uint32(p[1])<<16 | uint32(p[2])<<8 | uint32(p[3])
}

// u31 reads a 31-bit field after a reserved bit, which is ignored
// (section 4.1).
func u31(p []byte) uint32 { return u32(p) & (1<<31 - 1) }

// Parse parses the frame at the start of buf, of which it returns the
// size in n (HeaderLen plus the payload's length). maxFrameSize is the
// SETTINGS_MAX_FRAME_SIZE this endpoint advertised (DefaultMaxFrameSize
// until the peer acknowledges a larger one): a longer frame is refused
// once its header has arrived.
//
// It returns ErrIncomplete if buf holds less than the whole frame. Any
// other error is an *Error: on a stream error, n and f's header (Type,
// Flags, Length, Stream, and Data for HEADERS) are set, and the caller
// resets the stream and goes on after n bytes; on a connection error the
// caller sends GOAWAY and closes (see the package doc).
func Parse(buf []byte, maxFrameSize uint32) (f Frame, n int, err error) {
	if len(buf) < HeaderLen {
		return f, 0, ErrIncomplete
	}
	f.Length = uint32(buf[0])<<16 | uint32(buf[1])<<8 | uint32(buf[2])
	f.Type = Type(buf[3])
	f.Flags = Flags(buf[4])
	f.Stream = u31(buf[5:])
	if f.Length > maxFrameSize {
		return f, 0, ErrFrameTooLarge
	}
	n = HeaderLen + int(f.Length)
	if len(buf) < n {
		return f, 0, ErrIncomplete
	}
	p := buf[HeaderLen:n:n]
	switch f.Type {
	case TypeData:
		err = f.parseData(p)
	case TypeHeaders:
		err = f.parseHeaders(p)
	case TypePriority:
		err = f.parsePriority(p)
	case TypeRSTStream:
		err = f.parseRSTStream(p)
	case TypeSettings:
		err = f.parseSettings(p)
	case TypePushPromise:
		err = f.parsePushPromise(p)
	case TypePing:
		err = f.parsePing(p)
	case TypeGoAway:
		err = f.parseGoAway(p)
	case TypeWindowUpdate:
		err = f.parseWindowUpdate(p)
	case TypeContinuation:
		if f.Stream == 0 {
			err = ErrStreamZero // section 6.10
		}
		f.Data = p
	default:
		// An unknown type is the caller's to ignore (section 5.5).
		f.Data = p
	}
	return f, n, err
}

// unpad removes the Pad Length field and the padding of DATA, HEADERS and
// PUSH_PROMISE (sections 6.1, 6.2, 6.6), if FlagPadded is set. The padding
// is not checked to be zeros: a receiver MAY treat non-zero padding as an
// error, and nothing depends on it.
func (f *Frame) unpad(p []byte) ([]byte, error) {
	if !f.Flags.Has(FlagPadded) {
		return p, nil
	}
	if len(p) < 1 {
		return nil, ErrFrameTooShort
	}
	pad := int(p[0])
	p = p[1:]
	if pad > len(p) {
		// The padding is as long as the payload (Pad Length field
		// included) or longer.
		return nil, ErrPadding
	}
	return p[:len(p)-pad], nil
}

func (f *Frame) parseData(p []byte) (err error) {
	if f.Stream == 0 {
		return ErrStreamZero // section 6.1
	}
	f.Data, err = f.unpad(p)
	return err
}

func (f *Frame) parseHeaders(p []byte) (err error) {
	if f.Stream == 0 {
		return ErrStreamZero // section 6.2
	}
	if p, err = f.unpad(p); err != nil {
		return err
	}
	if f.Flags.Has(FlagPriority) {
		// Exclusive bit and Stream Dependency (4 bytes), Weight (1 byte):
		// deprecated (section 5.3.2), skipped.
		if len(p) < 5 {
			return ErrFrameTooShort
		}
		dep := u31(p)
		p = p[5:]
		if dep == f.Stream {
			f.Data = p
			return streamError(ErrSelfDependency, f.Stream)
		}
	}
	f.Data = p
	return nil
}

func (f *Frame) parsePriority(p []byte) error {
	if f.Stream == 0 {
		return ErrStreamZero // section 6.3
	}
	if len(p) != 5 {
		return streamError(ErrPriorityLength, f.Stream)
	}
	f.Data = p
	if u31(p) == f.Stream {
		return streamError(ErrSelfDependency, f.Stream)
	}
	return nil
}

func (f *Frame) parseRSTStream(p []byte) error {
	if f.Stream == 0 {
		return ErrStreamZero // section 6.4
	}
	if len(p) != 4 {
		return ErrRSTStreamLength
	}
	f.ErrCode = ErrCode(u32(p))
	return nil
}

func (f *Frame) parseSettings(p []byte) error {
	if f.Stream != 0 {
		return ErrStreamNonZero // section 6.5
	}
	if f.Flags.Has(FlagAck) {
		if len(p) != 0 {
			return ErrSettingsLength
		}
		return nil
	}
	if len(p)%6 != 0 {
		return ErrSettingsLength
	}
	f.Data = p
	for i := range f.NumSettings() {
		if err := f.Setting(i).check(); err != nil {
			return err
		}
	}
	return nil
}

func (f *Frame) parsePushPromise(p []byte) (err error) {
	if f.Stream == 0 {
		return ErrStreamZero // section 6.6
	}
	if p, err = f.unpad(p); err != nil {
		return err
	}
	if len(p) < 4 {
		return ErrFrameTooShort
	}
	f.Promised = u31(p)
	f.Data = p[4:]
	return nil
}

func (f *Frame) parsePing(p []byte) error {
	if f.Stream != 0 {
		return ErrStreamNonZero // section 6.7
	}
	if len(p) != 8 {
		return ErrPingLength
	}
	f.Data = p
	return nil
}

func (f *Frame) parseGoAway(p []byte) error {
	if f.Stream != 0 {
		return ErrStreamNonZero // section 6.8
	}
	if len(p) < 8 {
		return ErrGoAwayLength
	}
	f.LastStream = u31(p)
	f.ErrCode = ErrCode(u32(p[4:]))
	f.Data = p[8:]
	return nil
}

func (f *Frame) parseWindowUpdate(p []byte) error {
	if len(p) != 4 {
		return ErrWindowUpdateLength // section 6.9
	}
	f.Increment = u31(p)
	if f.Increment == 0 {
		if f.Stream == 0 {
			return ErrZeroIncrement
		}
		return streamError(ErrZeroIncrement, f.Stream)
	}
	return nil
}
