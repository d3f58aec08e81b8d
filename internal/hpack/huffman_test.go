package hpack

import (
	"bytes"
	"errors"
	"testing"
)

// TestHuffmanTableCanonical checks the transcription of Appendix B
// against properties the RFC's code has: canonical (huffman.go's
// decoding depends on it), complete, and with EOS the all-ones code of
// the maximum length.
func TestHuffmanTableCanonical(t *testing.T) {
	var code uint32
	var prevLen uint8
	seen := 0
	for l := uint8(huffmanMinLen); l <= huffmanMaxLen; l++ {
		for sym, sl := range huffmanLens {
			if sl != l {
				continue
			}
			if prevLen != 0 {
				code = (code + 1) << (l - prevLen)
			}
			prevLen = l
			if huffmanCodes[sym] != code {
				t.Fatalf("symbol %d: code %#x, canonical %#x", sym, huffmanCodes[sym], code)
			}
			seen++
		}
	}
	if seen != 257 {
		t.Fatalf("%d symbols with lengths in [5, 30]", seen)
	}
	if code != 1<<30-1 || huffmanCodes[huffmanEOS] != 1<<30-1 {
		t.Fatalf("last code %#x: the code is not complete or EOS is not all ones", code)
	}
}

func TestHuffmanRoundTripAllBytes(t *testing.T) {
	var all []byte
	for i := 0; i < 256; i++ {
		all = append(all, byte(i))
		s := string([]byte{byte(i)})
		enc := appendHuffman(nil, s)
		if uint64(len(enc)) != huffmanEncodedLen(s) {
			t.Fatalf("byte %d: %d bytes, huffmanEncodedLen %d", i, len(enc), huffmanEncodedLen(s))
		}
		dec, err := huffmanDecode(nil, enc)
		if err != nil || string(dec) != s {
			t.Fatalf("byte %d: decoded %x, %v", i, dec, err)
		}
	}
	// All bytes together, and reversed, so codes straddle byte
	// boundaries at every offset.
	for _, s := range []string{string(all), string(reversed(all))} {
		enc := appendHuffman(nil, s)
		dec, err := huffmanDecode(nil, enc)
		if err != nil || string(dec) != s {
			t.Fatalf("round trip of all bytes failed: %v", err)
		}
	}
}

func reversed(b []byte) []byte {
	r := make([]byte, len(b))
	for i, c := range b {
		r[len(b)-1-i] = c
	}
	return r
}

func TestHuffmanKnown(t *testing.T) {
	// RFC 7541 C.4.1.
	enc := appendHuffman(nil, "www.example.com")
	if want := dehex(t, "f1e3 c2e5 f23a 6ba0 ab90 f4ff"); !bytes.Equal(enc, want) {
		t.Fatalf("got %x, want %x", enc, want)
	}
}

func TestHuffmanInvalid(t *testing.T) {
	cases := []struct {
		name string
		in   string
	}{
		// '0' is 00000: three bits of zero padding after it.
		{"padding not ones", "00"},
		// 'a' (00011) then a full byte of ones: padding of 11 bits.
		{"padding of 8 bits or more", "1f ff"},
		{"only padding, a whole byte", "ff"},
		// EOS (30 ones) then 2 bits of padding.
		{"EOS", "ff ff ff ff"},
		// EOS inside, followed by 'a'.
		{"EOS then a symbol", "ff ff ff fc 7f"},
		// The first 16 bits of a 28-bit code, then input ends.
		{"truncated code", "ff fe"},
	}
	for _, c := range cases {
		_, err := huffmanDecode(nil, dehex(t, c.in))
		if !errors.Is(err, ErrHuffman) {
			t.Errorf("%s (%s): err %v, want ErrHuffman", c.name, c.in, err)
		}
	}
	// Valid: 'a' (00011) and '0' (00000) padded with 3 ones; nothing.
	for _, in := range []string{"1f", "07", ""} {
		if _, err := huffmanDecode(nil, dehex(t, in)); err != nil {
			t.Errorf("%q: %v", in, err)
		}
	}
}
