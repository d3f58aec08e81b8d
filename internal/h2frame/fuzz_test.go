package h2frame

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// encode writes f back with the Append functions where one exists, the
// way this package's writers would send it: unpadded, without HEADERS
// priority fields, and with only the flags the type defines.
func encode(f Frame) []byte {
	es, eh := f.Flags.Has(FlagEndStream), f.Flags.Has(FlagEndHeaders)
	switch f.Type {
	case TypeData:
		return AppendData(nil, f.Stream, es, f.Data)
	case TypeHeaders:
		return AppendHeaders(nil, f.Stream, es, eh, f.Data)
	case TypePriority:
		return append(AppendFrameHeader(nil, len(f.Data), f.Type, 0, f.Stream), f.Data...)
	case TypeRSTStream:
		return AppendRSTStream(nil, f.Stream, f.ErrCode)
	case TypeSettings:
		if f.Flags.Has(FlagAck) {
			return AppendSettingsAck(nil)
		}
		var s []Setting
		for i := range f.NumSettings() {
			s = append(s, f.Setting(i))
		}
		return AppendSettings(nil, s...)
	case TypePushPromise:
		var fl Flags
		if eh {
			fl = FlagEndHeaders
		}
		b := AppendFrameHeader(nil, 4+len(f.Data), f.Type, fl, f.Stream)
		b = append32(b, f.Promised)
		return append(b, f.Data...)
	case TypePing:
		return AppendPing(nil, f.Flags.Has(FlagAck), [8]byte(f.Data))
	case TypeGoAway:
		return AppendGoAway(nil, f.LastStream, f.ErrCode, f.Data)
	case TypeWindowUpdate:
		return AppendWindowUpdate(nil, f.Stream, f.Increment)
	case TypeContinuation:
		return AppendContinuation(nil, f.Stream, eh, f.Data)
	}
	return append(AppendFrameHeader(nil, len(f.Data), f.Type, f.Flags, f.Stream), f.Data...)
}

// definedFlags are the flags each type defines, bar FlagPadded and
// FlagPriority, which encode drops with what they announce.
var definedFlags = map[Type]Flags{
	TypeData:         FlagEndStream,
	TypeHeaders:      FlagEndStream | FlagEndHeaders,
	TypeSettings:     FlagAck,
	TypePushPromise:  FlagEndHeaders,
	TypePing:         FlagAck,
	TypeContinuation: FlagEndHeaders,
}

// FuzzParse checks that Parse never panics, that its n and error agree
// with the input's length, that it reads nothing past the frame, and that
// a frame it accepts, written back by encode, parses to the same frame.
func FuzzParse(f *testing.F) {
	for _, tt := range roundTrips {
		f.Add(tt.in)
	}
	f.Add([]byte(Preface))
	f.Add(frame(TypeHeaders, FlagPadded|FlagPriority, 1, 2, 0, 0, 0, 3, 0, 0))
	f.Add(frame(TypeWindowUpdate, 0, 7, 0, 0, 0, 0))
	f.Add(frame(TypePriority, 0, 3, 0, 0, 0, 3, 0))
	f.Add(frame(TypeSettings, 0, 0, 0, 5, 1, 0, 0, 0))
	f.Add(raw(DefaultMaxFrameSize+1, TypeData, 0, 1))
	f.Fuzz(func(t *testing.T, in []byte) {
		fr, n, err := Parse(in, DefaultMaxFrameSize)
		var e *Error
		switch {
		case err == ErrIncomplete:
			if n != 0 {
				t.Fatalf("ErrIncomplete with n = %d", n)
			}
			if len(in) >= HeaderLen && len(in) >= HeaderLen+int(fr.Length) {
				t.Fatalf("ErrIncomplete on %d bytes holding a frame of %d", len(in), fr.Length)
			}
			return
		case err == nil:
		case errors.As(err, &e):
			if e.StreamID() == 0 {
				return // a connection error: nothing more to check
			}
			if n != HeaderLen+int(fr.Length) || e.StreamID() != fr.Stream {
				t.Fatalf("stream error %v with n = %d, frame %+v", err, n, fr)
			}
			return
		default:
			t.Fatalf("error %T %v is not an *Error", err, err)
		}
		if n != HeaderLen+int(fr.Length) || n > len(in) {
			t.Fatalf("n = %d for a frame of %d on %d bytes", n, fr.Length, len(in))
		}
		if fr.Stream >= 1<<31 || fr.LastStream >= 1<<31 || fr.Promised >= 1<<31 || fr.Increment >= 1<<31 {
			t.Fatalf("reserved bit kept: %+v", fr)
		}
		again, n2, err := Parse(in[:n:n], DefaultMaxFrameSize)
		if err != nil || n2 != n || !cmp.Equal(fr, again, cmpFrame) {
			t.Fatalf("parsing the frame alone: %v, %d, %+v; whole: %+v", err, n2, again, fr)
		}

		out := encode(fr)
		got, n, err := Parse(out, DefaultMaxFrameSize)
		if err != nil || n != len(out) {
			t.Fatalf("re-encoded %x: n, err = %d, %v", out, n, err)
		}
		want := fr
		if fl, ok := definedFlags[fr.Type]; ok || fr.Type <= TypeContinuation {
			want.Flags &= fl
		}
		want.Length = uint32(len(out) - HeaderLen)
		if d := cmp.Diff(want, got, cmpFrame); d != "" {
			t.Fatalf("re-encoded %x (-want +got):\n%s", out, d)
		}
	})
}
