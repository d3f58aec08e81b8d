package h2frame

import "testing"

func BenchmarkParseData(b *testing.B) {
	for _, bb := range []struct {
		name string
		in   []byte
	}{
		{"1KiB", AppendData(nil, 1, false, make([]byte, 1<<10))},
		{"16KiB-padded", frame(TypeData, FlagPadded, 1, append([]byte{255}, make([]byte, 1<<14-1)...)...)},
	} {
		b.Run(bb.name, func(b *testing.B) {
			b.SetBytes(int64(len(bb.in)))
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := Parse(bb.in, DefaultMaxFrameSize); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkParseSettings(b *testing.B) {
	in := AppendSettings(nil, Setting{SettingHeaderTableSize, 4096}, Setting{SettingEnablePush, 0},
		Setting{SettingMaxConcurrentStreams, 100}, Setting{SettingInitialWindowSize, 1 << 20},
		Setting{SettingMaxFrameSize, 1 << 14}, Setting{SettingMaxHeaderListSize, 1 << 16})
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := Parse(in, DefaultMaxFrameSize); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAppendHeaders(b *testing.B) {
	// About the size of a small response's HPACK-encoded field block.
	fragment := make([]byte, 64)
	dst := make([]byte, 0, 256)
	b.SetBytes(int64(HeaderLen + len(fragment)))
	b.ReportAllocs()
	for b.Loop() {
		dst = AppendHeaders(dst[:0], 1, false, true, fragment)
	}
}

// TestParseDoesNotAllocate: a server parses every frame it receives;
// errors aside (a stream error allocates), that must not cost garbage.
func TestParseDoesNotAllocate(t *testing.T) {
	for _, tt := range roundTrips {
		if a := testing.AllocsPerRun(10, func() {
			if _, _, err := Parse(tt.in, DefaultMaxFrameSize); err != nil {
				t.Fatal(err)
			}
		}); a != 0 {
			t.Errorf("%s: %v allocations", tt.name, a)
		}
	}
	dst := make([]byte, 0, 64)
	if a := testing.AllocsPerRun(10, func() {
		dst = AppendWindowUpdate(AppendSettingsAck(dst[:0]), 1, 1)
	}); a != 0 {
		t.Errorf("Append into capacity: %v allocations", a)
	}
}
