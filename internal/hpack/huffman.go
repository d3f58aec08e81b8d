package hpack

// Decoding relies on the code of RFC 7541 Appendix B being canonical:
// the codes of one length are consecutive integers in symbol order, and
// every code of length L is below (in its first L bits) every longer
// code's prefix. So a code of length L is recognised by comparing the
// next L bits against the range of codes of that length.
const (
	huffmanMinLen = 5
	huffmanMaxLen = 30
	huffmanEOS    = 256
)

var (
	// huffmanFirst[L] is the smallest code of length L and
	// huffmanCount[L] how many codes have that length.
	huffmanFirst [huffmanMaxLen + 1]uint32
	huffmanCount [huffmanMaxLen + 1]uint32
	// huffmanStart[L] is where the symbols of length L begin in
	// huffmanSyms, which lists symbols ordered by code.
	huffmanStart [huffmanMaxLen + 1]uint16
	huffmanSyms  [257]uint16

	// huffmanFast maps the next 8 bits to the symbol whose code of at
	// most 8 bits they begin with, and its length, or length 0. Such
	// codes cover the characters most header text uses, so most
	// symbols decode with one lookup.
	huffmanFast [256]struct{ sym, len uint8 }
)

func init() {
	for _, l := range huffmanLens {
		huffmanCount[l]++
	}
	var pos uint16
	for l := huffmanMinLen; l <= huffmanMaxLen; l++ {
		huffmanStart[l] = pos
		first := ^uint32(0)
		for sym, sl := range huffmanLens {
			if int(sl) != l {
				continue
			}
			first = min(first, huffmanCodes[sym])
			// Within a length, symbol order is code order.
			huffmanSyms[pos] = uint16(sym)
			pos++
		}
		huffmanFirst[l] = first
	}
	for sym, l := range huffmanLens[:256] {
		if l > 8 {
			continue
		}
		base := huffmanCodes[sym] << (8 - l)
		for s := uint32(0); s < 1<<(8-l); s++ {
			huffmanFast[base|s].sym = uint8(sym)
			huffmanFast[base|s].len = l
		}
	}
}

// huffmanEncodedLen returns the length in bytes of s Huffman coded.
func huffmanEncodedLen(s string) uint64 {
	var bits uint64
	for i := 0; i < len(s); i++ {
		bits += uint64(huffmanLens[s[i]])
	}
	return (bits + 7) / 8
}

// appendHuffman appends s Huffman coded, padded with the most
// significant bits of EOS, all ones (RFC 7541 5.2).
func appendHuffman(dst []byte, s string) []byte {
	var acc uint64 // pending bits, in the low nbits
	var nbits uint
	for i := 0; i < len(s); i++ {
		c := s[i]
		// nbits < 8 before, and codes are at most 30 bits: fits.
		acc = acc<<huffmanLens[c] | uint64(huffmanCodes[c])
		nbits += uint(huffmanLens[c])
		for nbits >= 8 {
			nbits -= 8
			dst = append(dst, byte(acc>>nbits))
		}
	}
	if nbits > 0 {
		pad := 8 - nbits
		dst = append(dst, byte(acc<<pad)|byte(1<<pad-1))
	}
	return dst
}

// huffmanDecode appends the decoding of the Huffman-coded p to dst.
func huffmanDecode(dst []byte, p []byte) ([]byte, error) {
	var acc uint64 // unread bits, in the low nbits
	var nbits uint
	for {
		// Keep at least the longest code buffered while input lasts.
		for nbits <= 56 && len(p) > 0 {
			acc = acc<<8 | uint64(p[0])
			p = p[1:]
			nbits += 8
		}
		if nbits == 0 {
			return dst, nil
		}
		l := uint(huffmanMinLen)
		if nbits >= 8 {
			if e := huffmanFast[uint8(acc>>(nbits-8))]; e.len != 0 {
				dst = append(dst, e.sym)
				nbits -= uint(e.len)
				acc &= 1<<nbits - 1
				continue
			}
			l = 9 // no code of 8 bits or fewer matches
		}
		sym := -1
		for ; l <= huffmanMaxLen && l <= nbits; l++ {
			code := uint32(acc>>(nbits-l)) & (1<<l - 1)
			if code-huffmanFirst[l] < huffmanCount[l] {
				sym = int(huffmanSyms[uint32(huffmanStart[l])+code-huffmanFirst[l]])
				break
			}
		}
		if sym < 0 {
			// The remaining bits are no whole code: they must be
			// padding, shorter than 8 bits and all ones (RFC 7541 5.2).
			// With 30 bits left a code always matches, so this only
			// happens at the end of the input.
			if nbits > 7 || acc&(1<<nbits-1) != 1<<nbits-1 {
				return dst, ErrHuffman
			}
			return dst, nil
		}
		if sym == huffmanEOS {
			return dst, ErrHuffman
		}
		dst = append(dst, byte(sym))
		nbits -= l
		acc &= 1<<nbits - 1
	}
}
