package h2frame

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// raw builds a frame byte by byte, so that tests can send what the Append
// functions refuse to write.
func raw(length int, t Type, fl Flags, stream uint32, payload ...byte) []byte {
	b := []byte{byte(length >> 16), byte(length >> 8), byte(length), byte(t), byte(fl),
		byte(stream >> 24), byte(stream >> 16), byte(stream >> 8), byte(stream)}
	return append(b, payload...)
}

// frame builds a frame whose length is its payload's.
func frame(t Type, fl Flags, stream uint32, payload ...byte) []byte {
	return raw(len(payload), t, fl, stream, payload...)
}

var cmpFrame = cmpopts.EquateEmpty()

var roundTrips = []struct {
	name string
	in   []byte
	want Frame
}{
	{"DATA", AppendData(nil, 1, false, []byte("hello")),
		Frame{Type: TypeData, Length: 5, Stream: 1, Data: []byte("hello")}},
	{"DATA END_STREAM empty", AppendData(nil, 3, true, nil),
		Frame{Type: TypeData, Flags: FlagEndStream, Stream: 3}},
	{"HEADERS", AppendHeaders(nil, 5, true, true, []byte{0x82, 0x86}),
		Frame{Type: TypeHeaders, Flags: FlagEndStream | FlagEndHeaders, Length: 2, Stream: 5, Data: []byte{0x82, 0x86}}},
	{"HEADERS no END_HEADERS", AppendHeaders(nil, 7, false, false, []byte{0x84}),
		Frame{Type: TypeHeaders, Length: 1, Stream: 7, Data: []byte{0x84}}},
	{"CONTINUATION", AppendContinuation(nil, 7, true, []byte{0x41, 0x8a}),
		Frame{Type: TypeContinuation, Flags: FlagEndHeaders, Length: 2, Stream: 7, Data: []byte{0x41, 0x8a}}},
	{"SETTINGS", AppendSettings(nil, Setting{SettingMaxConcurrentStreams, 100}, Setting{SettingInitialWindowSize, 1 << 20}, Setting{0xff, 7}),
		Frame{Type: TypeSettings, Length: 18, Data: []byte{0, 3, 0, 0, 0, 100, 0, 4, 0, 0x10, 0, 0, 0, 0xff, 0, 0, 0, 7}}},
	{"SETTINGS empty", AppendSettings(nil),
		Frame{Type: TypeSettings}},
	{"SETTINGS ACK", AppendSettingsAck(nil),
		Frame{Type: TypeSettings, Flags: FlagAck}},
	{"PING", AppendPing(nil, false, [8]byte{1, 2, 3, 4, 5, 6, 7, 8}),
		Frame{Type: TypePing, Length: 8, Data: []byte{1, 2, 3, 4, 5, 6, 7, 8}}},
	{"PING ACK", AppendPing(nil, true, [8]byte{8}),
		Frame{Type: TypePing, Flags: FlagAck, Length: 8, Data: []byte{8, 0, 0, 0, 0, 0, 0, 0}}},
	{"GOAWAY", AppendGoAway(nil, 9, CodeEnhanceYourCalm, []byte("slow down")),
		Frame{Type: TypeGoAway, Length: 17, LastStream: 9, ErrCode: CodeEnhanceYourCalm, Data: []byte("slow down")}},
	{"GOAWAY no debug", AppendGoAway(nil, 0, CodeNoError, nil),
		Frame{Type: TypeGoAway, Length: 8}},
	{"RST_STREAM", AppendRSTStream(nil, 11, CodeCancel),
		Frame{Type: TypeRSTStream, Length: 4, Stream: 11, ErrCode: CodeCancel}},
	{"WINDOW_UPDATE connection", AppendWindowUpdate(nil, 0, MaxWindowSize),
		Frame{Type: TypeWindowUpdate, Length: 4, Increment: MaxWindowSize}},
	{"WINDOW_UPDATE stream", AppendWindowUpdate(nil, 13, 1),
		Frame{Type: TypeWindowUpdate, Length: 4, Stream: 13, Increment: 1}},
	{"PRIORITY", frame(TypePriority, 0, 3, 0x80, 0, 0, 1, 15),
		Frame{Type: TypePriority, Length: 5, Stream: 3, Data: []byte{0x80, 0, 0, 1, 15}}},
	{"PUSH_PROMISE", frame(TypePushPromise, FlagEndHeaders, 1, 0, 0, 0, 2, 0x82),
		Frame{Type: TypePushPromise, Flags: FlagEndHeaders, Length: 5, Stream: 1, Promised: 2, Data: []byte{0x82}}},
	{"PUSH_PROMISE padded", frame(TypePushPromise, FlagPadded, 1, 1, 0x80, 0, 0, 4, 0x82, 0),
		Frame{Type: TypePushPromise, Flags: FlagPadded, Length: 7, Stream: 1, Promised: 4, Data: []byte{0x82}}},
	{"unknown type", frame(0xfa, 0xff, 0, 1, 2, 3),
		Frame{Type: 0xfa, Flags: 0xff, Length: 3, Data: []byte{1, 2, 3}}},
	{"unknown type on a stream", frame(0x10, 0, 5),
		Frame{Type: 0x10, Stream: 5}},

	// Section 4.1: the reserved bit is ignored, as are the reserved bits
	// of GOAWAY's Last-Stream-ID, WINDOW_UPDATE's increment and
	// PUSH_PROMISE's Promised Stream ID.
	{"reserved bit", frame(TypeData, 0, 1<<31|1, 'x'),
		Frame{Type: TypeData, Length: 1, Stream: 1, Data: []byte("x")}},
	{"GOAWAY reserved bit", frame(TypeGoAway, 0, 0, 0x80, 0, 0, 5, 0, 0, 0, 1),
		Frame{Type: TypeGoAway, Length: 8, LastStream: 5, ErrCode: CodeProtocolError}},
	{"WINDOW_UPDATE reserved bit", frame(TypeWindowUpdate, 0, 1, 0x80, 0, 0, 5),
		Frame{Type: TypeWindowUpdate, Length: 4, Stream: 1, Increment: 5}},
	// Section 4.1: flags a type does not define are kept, to be ignored.
	{"undefined flags kept", frame(TypeRSTStream, 0xfe, 1, 0, 0, 0, 8),
		Frame{Type: TypeRSTStream, Flags: 0xfe, Length: 4, Stream: 1, ErrCode: CodeCancel}},
	{"SETTINGS undefined setting", frame(TypeSettings, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff),
		Frame{Type: TypeSettings, Length: 6, Data: []byte{0, 0, 0xff, 0xff, 0xff, 0xff}}},

	// Padding (sections 6.1, 6.2): Pad Length and padding are removed,
	// Length keeps counting them.
	{"DATA padded", frame(TypeData, FlagPadded, 1, 2, 'h', 'i', 0, 0),
		Frame{Type: TypeData, Flags: FlagPadded, Length: 5, Stream: 1, Data: []byte("hi")}},
	{"DATA padding fills payload", frame(TypeData, FlagPadded|FlagEndStream, 1, 3, 0, 0, 0),
		Frame{Type: TypeData, Flags: FlagPadded | FlagEndStream, Length: 4, Stream: 1}},
	{"DATA zero padding", frame(TypeData, FlagPadded, 1, 0, 'a'),
		Frame{Type: TypeData, Flags: FlagPadded, Length: 2, Stream: 1, Data: []byte("a")}},
	{"DATA only Pad Length", frame(TypeData, FlagPadded, 1, 0),
		Frame{Type: TypeData, Flags: FlagPadded, Length: 1, Stream: 1}},
	{"HEADERS padded", frame(TypeHeaders, FlagPadded|FlagEndHeaders, 1, 1, 0x82, 0),
		Frame{Type: TypeHeaders, Flags: FlagPadded | FlagEndHeaders, Length: 3, Stream: 1, Data: []byte{0x82}}},
	{"HEADERS priority", frame(TypeHeaders, FlagPriority|FlagEndHeaders, 3, 0x80, 0, 0, 1, 255, 0x82),
		Frame{Type: TypeHeaders, Flags: FlagPriority | FlagEndHeaders, Length: 6, Stream: 3, Data: []byte{0x82}}},
	{"HEADERS padded priority", frame(TypeHeaders, FlagPadded|FlagPriority, 3, 2, 0, 0, 0, 1, 16, 0x82, 0x86, 0, 0),
		Frame{Type: TypeHeaders, Flags: FlagPadded | FlagPriority, Length: 10, Stream: 3, Data: []byte{0x82, 0x86}}},
	{"HEADERS padded priority empty fragment", frame(TypeHeaders, FlagPadded|FlagPriority, 3, 1, 0, 0, 0, 1, 16, 0),
		Frame{Type: TypeHeaders, Flags: FlagPadded | FlagPriority, Length: 7, Stream: 3}},
}

func TestRoundTrip(t *testing.T) {
	for _, tt := range roundTrips {
		t.Run(tt.name, func(t *testing.T) {
			// A frame followed by the next one's first bytes: Parse takes
			// its own only.
			buf := append(bytes.Clone(tt.in), 0, 0)
			f, n, err := Parse(buf, DefaultMaxFrameSize)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if n != len(tt.in) {
				t.Errorf("n = %d, want %d", n, len(tt.in))
			}
			if d := cmp.Diff(tt.want, f, cmpFrame); d != "" {
				t.Errorf("frame (-want +got):\n%s", d)
			}
			// Data aliases the frame's payload in buf, its capacity
			// ending with the frame so that an append cannot overwrite
			// the next frame.
			if cap(f.Data) > 0 && &f.Data[:cap(f.Data)][cap(f.Data)-1] != &buf[n-1] {
				t.Error("Data does not alias the buffer up to the frame's end")
			}
		})
	}
}

func TestSettingsAccessors(t *testing.T) {
	want := []Setting{
		{SettingHeaderTableSize, 0}, {SettingEnablePush, 0}, {SettingEnablePush, 1},
		{SettingMaxConcurrentStreams, 1<<32 - 1}, {SettingInitialWindowSize, MaxWindowSize},
		{SettingMaxFrameSize, DefaultMaxFrameSize}, {SettingMaxFrameSize, MaxFrameSizeLimit},
		{SettingMaxHeaderListSize, 1 << 16}, {0, 1<<32 - 1}, {0xffff, 3},
	}
	f, _, err := Parse(AppendSettings(nil, want...), DefaultMaxFrameSize)
	if err != nil {
		t.Fatal(err)
	}
	var got []Setting
	for i := range f.NumSettings() {
		got = append(got, f.Setting(i))
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("settings (-want +got):\n%s", d)
	}
}

func TestParseErrors(t *testing.T) {
	big := make([]byte, DefaultMaxFrameSize+1)
	for _, tt := range []struct {
		name   string
		in     []byte
		want   *Error
		stream uint32 // non-zero: a stream error on it
	}{
		{"oversize", raw(DefaultMaxFrameSize+1, TypeData, 0, 1), ErrFrameTooLarge, 0},
		{"oversize whole", frame(TypeData, 0, 1, big...), ErrFrameTooLarge, 0},
		{"oversize unknown type", raw(MaxFrameSizeLimit, 0xee, 0, 0), ErrFrameTooLarge, 0},

		{"DATA stream 0", frame(TypeData, 0, 0, 'x'), ErrStreamZero, 0},
		{"DATA stream 0 reserved bit", frame(TypeData, 0, 1<<31), ErrStreamZero, 0},
		{"HEADERS stream 0", frame(TypeHeaders, FlagEndHeaders, 0, 0x82), ErrStreamZero, 0},
		{"PRIORITY stream 0", frame(TypePriority, 0, 0, 0, 0, 0, 1, 0), ErrStreamZero, 0},
		{"RST_STREAM stream 0", frame(TypeRSTStream, 0, 0, 0, 0, 0, 8), ErrStreamZero, 0},
		{"PUSH_PROMISE stream 0", frame(TypePushPromise, 0, 0, 0, 0, 0, 2), ErrStreamZero, 0},
		{"CONTINUATION stream 0", frame(TypeContinuation, FlagEndHeaders, 0, 0x82), ErrStreamZero, 0},
		{"SETTINGS on a stream", frame(TypeSettings, 0, 1), ErrStreamNonZero, 0},
		{"SETTINGS ACK on a stream", frame(TypeSettings, FlagAck, 1), ErrStreamNonZero, 0},
		{"PING on a stream", frame(TypePing, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0), ErrStreamNonZero, 0},
		{"GOAWAY on a stream", frame(TypeGoAway, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0), ErrStreamNonZero, 0},

		{"DATA padding = payload", frame(TypeData, FlagPadded, 1, 2, 0), ErrPadding, 0},
		{"DATA padding > payload", frame(TypeData, FlagPadded, 1, 255, 'a', 'b'), ErrPadding, 0},
		{"DATA padded empty", frame(TypeData, FlagPadded, 1), ErrFrameTooShort, 0},
		{"HEADERS padding = payload", frame(TypeHeaders, FlagPadded, 1, 1), ErrPadding, 0},
		{"HEADERS padded empty", frame(TypeHeaders, FlagPadded, 1), ErrFrameTooShort, 0},
		{"HEADERS priority short", frame(TypeHeaders, FlagPriority, 1, 0, 0, 0, 3), ErrFrameTooShort, 0},
		{"HEADERS padding leaves no priority", frame(TypeHeaders, FlagPadded|FlagPriority, 1, 2, 0, 0, 0, 3, 0, 0), ErrFrameTooShort, 0},
		{"PUSH_PROMISE padding > payload", frame(TypePushPromise, FlagPadded, 1, 5, 0, 0, 0, 2), ErrPadding, 0},
		{"PUSH_PROMISE short", frame(TypePushPromise, 0, 1, 0, 0, 2), ErrFrameTooShort, 0},

		{"HEADERS self-dependency", frame(TypeHeaders, FlagPriority|FlagEndHeaders, 3, 0, 0, 0, 3, 0, 0x82), ErrSelfDependency, 3},
		{"PRIORITY self-dependency", frame(TypePriority, 0, 5, 0x80, 0, 0, 5, 0), ErrSelfDependency, 5},
		{"PRIORITY length 4", frame(TypePriority, 0, 3, 0, 0, 0, 1), ErrPriorityLength, 3},
		{"PRIORITY length 6", frame(TypePriority, 0, 3, 0, 0, 0, 1, 0, 0), ErrPriorityLength, 3},
		{"RST_STREAM length 3", frame(TypeRSTStream, 0, 1, 0, 0, 8), ErrRSTStreamLength, 0},
		{"RST_STREAM length 5", frame(TypeRSTStream, 0, 1, 0, 0, 0, 8, 0), ErrRSTStreamLength, 0},

		{"SETTINGS length 5", frame(TypeSettings, 0, 0, 0, 3, 0, 0, 0), ErrSettingsLength, 0},
		{"SETTINGS length 7", frame(TypeSettings, 0, 0, 0, 3, 0, 0, 0, 1, 0), ErrSettingsLength, 0},
		{"SETTINGS ACK with payload", frame(TypeSettings, FlagAck, 0, 0, 3, 0, 0, 0, 1), ErrSettingsLength, 0},
		{"ENABLE_PUSH 2", frame(TypeSettings, 0, 0, 0, 2, 0, 0, 0, 2), ErrEnablePush, 0},
		{"ENABLE_PUSH max", frame(TypeSettings, 0, 0, 0, 2, 0xff, 0xff, 0xff, 0xff), ErrEnablePush, 0},
		{"INITIAL_WINDOW_SIZE 2^31", frame(TypeSettings, 0, 0, 0, 4, 0x80, 0, 0, 0), ErrInitialWindowSize, 0},
		{"MAX_FRAME_SIZE 2^14-1", frame(TypeSettings, 0, 0, 0, 5, 0, 0, 0x3f, 0xff), ErrMaxFrameSize, 0},
		{"MAX_FRAME_SIZE 2^24", frame(TypeSettings, 0, 0, 0, 5, 1, 0, 0, 0), ErrMaxFrameSize, 0},
		{"MAX_FRAME_SIZE 0", frame(TypeSettings, 0, 0, 0, 5, 0, 0, 0, 0), ErrMaxFrameSize, 0},
		{"bad setting after good ones", AppendSettings(nil, Setting{SettingEnablePush, 0}, Setting{SettingMaxFrameSize, 1 << 20}, Setting{SettingInitialWindowSize, 1 << 31}), ErrInitialWindowSize, 0},

		{"PING length 7", frame(TypePing, 0, 0, 0, 0, 0, 0, 0, 0, 0), ErrPingLength, 0},
		{"PING length 9", frame(TypePing, FlagAck, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), ErrPingLength, 0},
		{"PING empty", frame(TypePing, 0, 0), ErrPingLength, 0},
		{"GOAWAY length 7", frame(TypeGoAway, 0, 0, 0, 0, 0, 0, 0, 0, 0), ErrGoAwayLength, 0},
		{"GOAWAY empty", frame(TypeGoAway, 0, 0), ErrGoAwayLength, 0},
		{"WINDOW_UPDATE length 3", frame(TypeWindowUpdate, 0, 1, 0, 0, 1), ErrWindowUpdateLength, 0},
		{"WINDOW_UPDATE length 5 stream 0", frame(TypeWindowUpdate, 0, 0, 0, 0, 0, 1, 0), ErrWindowUpdateLength, 0},
		{"WINDOW_UPDATE 0 on a stream", frame(TypeWindowUpdate, 0, 7, 0, 0, 0, 0), ErrZeroIncrement, 7},
		{"WINDOW_UPDATE 0 reserved bit on a stream", frame(TypeWindowUpdate, 0, 7, 0x80, 0, 0, 0), ErrZeroIncrement, 7},
		{"WINDOW_UPDATE 0 on the connection", frame(TypeWindowUpdate, 0, 0, 0, 0, 0, 0), ErrZeroIncrement, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f, n, err := Parse(tt.in, DefaultMaxFrameSize)
			if !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("err %T is not an *Error", err)
			}
			if e.Code() != tt.want.Code() {
				t.Errorf("Code() = %v, want %v", e.Code(), tt.want.Code())
			}
			if e.StreamID() != tt.stream {
				t.Errorf("StreamID() = %d, want %d", e.StreamID(), tt.stream)
			}
			if tt.stream != 0 {
				// A stream error leaves the connection usable: the
				// caller skips the frame.
				if n != len(tt.in) || f.Stream != tt.stream || f.Type != Type(tt.in[3]) {
					t.Errorf("stream error: n = %d, f = %+v; want n = %d and the frame's header", n, f, len(tt.in))
				}
				if !strings.Contains(err.Error(), "stream ") {
					t.Errorf("Error() = %q does not name the stream", err)
				}
			}
		})
	}
}

// TestHeadersStreamErrorKeepsFragment: a HEADERS frame with a stream error
// still carries a field block the caller must decode, for the connection's
// HPACK state (section 4.3).
func TestHeadersStreamErrorKeepsFragment(t *testing.T) {
	f, _, err := Parse(frame(TypeHeaders, FlagPriority|FlagEndHeaders, 3, 0, 0, 0, 3, 0, 0x82, 0x86), DefaultMaxFrameSize)
	if !errors.Is(err, ErrSelfDependency) {
		t.Fatalf("err = %v", err)
	}
	if !bytes.Equal(f.Data, []byte{0x82, 0x86}) {
		t.Errorf("Data = %x, want 8286", f.Data)
	}
}

// TestStreamErrorIsNotOtherSentinel: a stream error matches its own
// sentinel only.
func TestStreamErrorIsNotOtherSentinel(t *testing.T) {
	_, _, err := Parse(frame(TypePriority, 0, 3, 0, 0, 0, 1), DefaultMaxFrameSize)
	if !errors.Is(err, ErrPriorityLength) || errors.Is(err, ErrRSTStreamLength) || errors.Is(err, ErrIncomplete) {
		t.Errorf("errors.Is misreports %v", err)
	}
	if errors.Is(ErrPriorityLength, err) {
		t.Error("the sentinel matches a stream error copying it")
	}
}

func TestMaxFrameSize(t *testing.T) {
	in := AppendData(nil, 1, false, make([]byte, 1<<20))
	if _, _, err := Parse(in, DefaultMaxFrameSize); !errors.Is(err, ErrFrameTooLarge) {
		t.Errorf("at the default: err = %v, want ErrFrameTooLarge", err)
	}
	if _, _, err := Parse(in, 1<<20-1); !errors.Is(err, ErrFrameTooLarge) {
		t.Errorf("one under: err = %v, want ErrFrameTooLarge", err)
	}
	if _, n, err := Parse(in, 1<<20); err != nil || n != len(in) {
		t.Errorf("at the limit: n, err = %d, %v", n, err)
	}
	if _, n, err := Parse(in[:HeaderLen+100], 1<<20); !errors.Is(err, ErrIncomplete) || n != 0 {
		t.Errorf("at the limit, partial: n, err = %d, %v", n, err)
	}
}

func TestIncomplete(t *testing.T) {
	for _, tt := range roundTrips {
		for i := range len(tt.in) {
			f, n, err := Parse(tt.in[:i], DefaultMaxFrameSize)
			if err != ErrIncomplete || n != 0 {
				t.Errorf("%s: %d of %d bytes: n, err = %d, %v; want 0, ErrIncomplete", tt.name, i, len(tt.in), n, err)
			}
			if f.Data != nil {
				t.Errorf("%s: %d bytes: Data set on ErrIncomplete", tt.name, i)
			}
		}
	}
}

func TestParseSequence(t *testing.T) {
	var buf []byte
	buf = AppendSettings(buf, Setting{SettingMaxConcurrentStreams, 100})
	buf = AppendWindowUpdate(buf, 0, 1<<20)
	buf = AppendHeaders(buf, 1, false, false, []byte{0x82})
	buf = AppendContinuation(buf, 1, true, []byte{0x86})
	buf = AppendData(buf, 1, true, []byte("body"))
	buf = AppendPing(buf, false, [8]byte{})
	want := []Type{TypeSettings, TypeWindowUpdate, TypeHeaders, TypeContinuation, TypeData, TypePing}
	for i, typ := range want {
		f, n, err := Parse(buf, DefaultMaxFrameSize)
		if err != nil || f.Type != typ {
			t.Fatalf("frame %d: %v, %v; want %v", i, f.Type, err, typ)
		}
		buf = buf[n:]
	}
	if len(buf) != 0 {
		t.Errorf("%d bytes left", len(buf))
	}
}

func TestMatchPreface(t *testing.T) {
	for i := range len(Preface) {
		if n, err := MatchPreface([]byte(Preface[:i])); err != ErrIncomplete || n != 0 {
			t.Errorf("%d bytes: n, err = %d, %v; want ErrIncomplete", i, n, err)
		}
	}
	in := []byte(Preface + string(AppendSettings(nil)))
	if n, err := MatchPreface(in); err != nil || n != len(Preface) {
		t.Errorf("preface and SETTINGS: n, err = %d, %v", n, err)
	}
	for _, s := range []string{
		"GET / HTTP/1.1\r\nHost: h\r\n\r\n",
		"G",
		"PRI * HTTP/1.1\r\n",
		"PRI * HTTP/2.0\r\n\r\n\r\n",
		"PRI * HTTP/2.0\r\n\r\nSM\r\n\n",
		"pri",
	} {
		n, err := MatchPreface([]byte(s))
		if !errors.Is(err, ErrBadPreface) || n != 0 {
			t.Errorf("%q: n, err = %d, %v; want ErrBadPreface", s, n, err)
		}
		var e *Error
		if errors.As(err, &e) && (e.Code() != CodeProtocolError || e.StreamID() != 0) {
			t.Errorf("%q: %v, want a connection PROTOCOL_ERROR", s, e)
		}
	}
}

func TestStrings(t *testing.T) {
	for _, tt := range []struct{ got, want string }{
		{CodeNoError.String(), "NO_ERROR"},
		{CodeFlowControlError.String(), "FLOW_CONTROL_ERROR"},
		{CodeHTTP11Required.String(), "HTTP_1_1_REQUIRED"},
		{ErrCode(0xe).String(), "0xe"},
		{TypeData.String(), "DATA"},
		{TypeWindowUpdate.String(), "WINDOW_UPDATE"},
		{TypeContinuation.String(), "CONTINUATION"},
		{Type(0xa).String(), "UNKNOWN_0xa"},
		{SettingMaxHeaderListSize.String(), "MAX_HEADER_LIST_SIZE"},
		{SettingID(0).String(), "UNKNOWN_0x0"},
		{SettingID(0x8).String(), "UNKNOWN_0x8"},
		{ErrPingLength.Error(), "h2frame: PING length not 8 (FRAME_SIZE_ERROR)"},
		{streamError(ErrZeroIncrement, 7).Error(), "h2frame: WINDOW_UPDATE increment 0 (PROTOCOL_ERROR, stream 7)"},
	} {
		if tt.got != tt.want {
			t.Errorf("got %q, want %q", tt.got, tt.want)
		}
	}
}

func TestFlagsHas(t *testing.T) {
	fl := FlagEndStream | FlagPadded
	if !fl.Has(FlagEndStream) || !fl.Has(FlagPadded) || fl.Has(FlagEndHeaders) || fl.Has(FlagEndStream|FlagEndHeaders) {
		t.Errorf("Has misreports %#x", fl)
	}
}

func TestAppendLayout(t *testing.T) {
	// Byte-exact encodings, written from RFC 9113 section 4.1's layout:
	// Length (24), Type (8), Flags (8), R + Stream Identifier (31).
	for _, tt := range []struct {
		name string
		got  []byte
		want []byte
	}{
		{"DATA", AppendData([]byte{0xaa}, 0x01020304, true, []byte("ab")),
			[]byte{0xaa, 0, 0, 2, 0, 1, 1, 2, 3, 4, 'a', 'b'}},
		{"HEADERS", AppendHeaders(nil, 1, false, true, []byte{0x82}),
			[]byte{0, 0, 1, 1, 4, 0, 0, 0, 1, 0x82}},
		{"CONTINUATION", AppendContinuation(nil, 1, false, nil),
			[]byte{0, 0, 0, 9, 0, 0, 0, 0, 1}},
		{"SETTINGS", AppendSettings(nil, Setting{SettingMaxFrameSize, 0x00abcdef}),
			[]byte{0, 0, 6, 4, 0, 0, 0, 0, 0, 0, 5, 0, 0xab, 0xcd, 0xef}},
		{"SETTINGS ACK", AppendSettingsAck(nil),
			[]byte{0, 0, 0, 4, 1, 0, 0, 0, 0}},
		{"PING ACK", AppendPing(nil, true, [8]byte{1, 2, 3, 4, 5, 6, 7, 8}),
			[]byte{0, 0, 8, 6, 1, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8}},
		{"GOAWAY", AppendGoAway(nil, 0x7fffffff, CodeHTTP11Required, []byte("x")),
			[]byte{0, 0, 9, 7, 0, 0, 0, 0, 0, 0x7f, 0xff, 0xff, 0xff, 0, 0, 0, 0xd, 'x'}},
		{"RST_STREAM", AppendRSTStream(nil, 3, CodeRefusedStream),
			[]byte{0, 0, 4, 3, 0, 0, 0, 0, 3, 0, 0, 0, 7}},
		{"WINDOW_UPDATE", AppendWindowUpdate(nil, 3, 0x01000000),
			[]byte{0, 0, 4, 8, 0, 0, 0, 0, 3, 1, 0, 0, 0}},
		{"frame header", AppendFrameHeader(nil, MaxFrameSizeLimit, 0xbb, 0xcc, 1<<31-1),
			[]byte{0xff, 0xff, 0xff, 0xbb, 0xcc, 0x7f, 0xff, 0xff, 0xff}},
	} {
		if !bytes.Equal(tt.got, tt.want) {
			t.Errorf("%s:\n got %x\nwant %x", tt.name, tt.got, tt.want)
		}
	}
}

func TestAppendPanics(t *testing.T) {
	for name, fn := range map[string]func(){
		"increment 0":        func() { AppendWindowUpdate(nil, 1, 0) },
		"increment 2^31":     func() { AppendWindowUpdate(nil, 0, 1<<31) },
		"stream 2^31":        func() { AppendRSTStream(nil, 1<<31, CodeCancel) },
		"payload over 2^24":  func() { AppendFrameHeader(nil, MaxFrameSizeLimit+1, TypeData, 0, 1) },
		"negative length":    func() { AppendFrameHeader(nil, -1, TypeData, 0, 1) },
		"DATA stream 2^32-1": func() { AppendData(nil, 1<<32-1, false, nil) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			fn()
		}()
	}
}
