package ws

import "encoding/binary"

// utf8State validates UTF-8 (RFC 3629) that arrives in pieces, so that a
// text message fails as soon as its first invalid byte arrives, not when
// the message is complete. It remembers how many continuation bytes the
// sequence in progress still needs and the range its next one must be
// in: the ranges after E0, ED, F0 and F4 exclude overlong forms,
// surrogates and code points above U+10FFFF.
type utf8State struct {
	need   uint8
	lo, hi byte
}

// write validates b as the continuation of what came before. It reports
// false at the first byte that cannot be part of valid UTF-8.
func (v *utf8State) write(b []byte) bool {
	i := 0
	for i < len(b) {
		if v.need == 0 {
			// ASCII, eight bytes at a time.
			for i+8 <= len(b) && binary.LittleEndian.Uint64(b[i:])&0x8080808080808080 == 0 {
				i += 8
			}
			if i == len(b) {
				break
			}
			c := b[i]
			i++
			switch {
			case c < 0x80:
			case c >= 0xC2 && c <= 0xDF:
				v.need, v.lo, v.hi = 1, 0x80, 0xBF
			case c == 0xE0:
				v.need, v.lo, v.hi = 2, 0xA0, 0xBF
			case c == 0xED:
				v.need, v.lo, v.hi = 2, 0x80, 0x9F
			case c >= 0xE1 && c <= 0xEF:
				v.need, v.lo, v.hi = 2, 0x80, 0xBF
			case c == 0xF0:
				v.need, v.lo, v.hi = 3, 0x90, 0xBF
			case c >= 0xF1 && c <= 0xF3:
				v.need, v.lo, v.hi = 3, 0x80, 0xBF
			case c == 0xF4:
				v.need, v.lo, v.hi = 3, 0x80, 0x8F
			default:
				return false
			}
			continue
		}
		c := b[i]
		if c < v.lo || c > v.hi {
			return false
		}
		i++
		v.need--
		v.lo, v.hi = 0x80, 0xBF
	}
	return true
}

// complete reports that no sequence is left unfinished: the end of a
// message may come here.
func (v *utf8State) complete() bool { return v.need == 0 }
