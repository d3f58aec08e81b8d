package hpack

import "fmt"

// maxInt is the largest integer the decoder accepts. Every integer in
// HPACK is an index, a string length or a table size; none needs more
// than 32 bits, and refusing more keeps all arithmetic on them safe.
const maxInt = 1<<32 - 1

// appendInt appends v in the integer representation of RFC 7541 5.1
// with an n-bit prefix; first carries the representation's bits above
// the prefix.
func appendInt(dst []byte, first byte, n uint, v uint64) []byte {
	limit := uint64(1)<<n - 1
	if v < limit {
		return append(dst, first|byte(v))
	}
	dst = append(dst, first|byte(limit))
	v -= limit
	for v >= 0x80 {
		dst = append(dst, byte(v)|0x80)
		v >>= 7
	}
	return append(dst, byte(v))
}

// readInt decodes an integer with an n-bit prefix (RFC 7541 5.1) from
// the start of p, ignoring the bits of p[0] above the prefix, and
// returns it and the bytes after it.
func readInt(p []byte, n uint) (uint64, []byte, error) {
	if len(p) == 0 {
		return 0, p, ErrTruncated
	}
	limit := uint64(1)<<n - 1
	v := uint64(p[0]) & limit
	p = p[1:]
	if v < limit {
		return v, p, nil
	}
	// Continuation bytes carry 7 bits each, least significant first.
	// Five of them exceed 32 bits, so a sixth is refused before any
	// shift could overflow.
	for shift := uint(0); ; shift += 7 {
		if len(p) == 0 {
			return 0, p, ErrTruncated
		}
		if shift > 28 {
			return 0, p, ErrInteger
		}
		b := p[0]
		p = p[1:]
		v += uint64(b&0x7f) << shift
		if v > maxInt {
			return 0, p, ErrInteger
		}
		if b&0x80 == 0 {
			return v, p, nil
		}
	}
}

// appendString appends s as a string literal (RFC 7541 5.2), Huffman
// coded when that is shorter, unless huffman is false.
func appendString(dst []byte, s string, huffman bool) []byte {
	if huffman {
		if n := huffmanEncodedLen(s); n < uint64(len(s)) {
			dst = appendInt(dst, 0x80, 7, n)
			return appendHuffman(dst, s)
		}
	}
	dst = appendInt(dst, 0, 7, uint64(len(s)))
	return append(dst, s...)
}

// readString decodes a string literal (RFC 7541 5.2) from the start of
// p, appends it to dst and returns dst and the bytes after the literal.
// Huffman decoding grows dst by at most 8/5 of the coded length (the
// shortest code has 5 bits), so the block's length bounds the memory
// spent.
func readString(p []byte, dst []byte) (_, rest []byte, err error) {
	if len(p) == 0 {
		return dst, p, ErrTruncated
	}
	huff := p[0]&0x80 != 0
	n, p, err := readInt(p, 7)
	if err != nil {
		return dst, p, err
	}
	if n > uint64(len(p)) {
		return dst, p, fmt.Errorf("%w: string of %d bytes with %d left", ErrTruncated, n, len(p))
	}
	if !huff {
		return append(dst, p[:n]...), p[n:], nil
	}
	dst, err = huffmanDecode(dst, p[:n])
	if err != nil {
		return dst, p, err
	}
	return dst, p[n:], nil
}
