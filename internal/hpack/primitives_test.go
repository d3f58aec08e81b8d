package hpack

import (
	"errors"
	"testing"
)

func TestIntegerRoundTrip(t *testing.T) {
	for n := uint(1); n <= 8; n++ {
		for _, v := range []uint64{0, 1, 1<<n - 2, 1<<n - 1, 1 << n, 127 + 1<<n, 1 << 14, 1<<21 + 5, 1 << 28, maxInt} {
			enc := appendInt(nil, 0, n, v)
			// Bits above the prefix belong to the representation and
			// must be ignored.
			if n < 8 {
				enc[0] |= 0xff << n
			}
			got, rest, err := readInt(enc, n)
			if err != nil || got != v || len(rest) != 0 {
				t.Errorf("prefix %d, %d: got %d, %d left, %v", n, v, got, len(rest), err)
			}
			for cut := 1; cut < len(enc); cut++ {
				if _, _, err := readInt(enc[:cut], n); !errors.Is(err, ErrTruncated) {
					t.Errorf("prefix %d, %d cut to %d bytes: %v", n, v, cut, err)
				}
			}
		}
	}
	// One past the limit.
	if _, _, err := readInt(appendInt(nil, 0, 5, maxInt+1), 5); !errors.Is(err, ErrInteger) {
		t.Errorf("maxInt+1: %v", err)
	}
}

func TestStringLiteral(t *testing.T) {
	for _, s := range []string{"", "a", "www.example.com", "\x00\xff\x80 binary"} {
		for _, huff := range []bool{false, true} {
			enc := appendString(nil, s, huff)
			got, rest, err := readString(enc, []byte("prefix:"))
			if err != nil || string(got) != "prefix:"+s || len(rest) != 0 {
				t.Errorf("%q huffman=%v: got %q, %d left, %v", s, huff, got, len(rest), err)
			}
		}
	}
}
