package ws

import (
	"encoding/binary"
	"fmt"
)

// A frame's first two bytes (RFC 6455 section 5.2):
//
//	bit 7 of byte 0: FIN, the message's last frame
//	bits 6-4:        RSV1-3; RSV1 marks a compressed message (RFC 7692)
//	bits 3-0:        the opcode
//	bit 7 of byte 1: MASK, set on every client frame and on none of a server's
//	bits 6-0:        payload length: 0-125, or 126 (a 16-bit length
//	                 follows) or 127 (a 64-bit one, its top bit 0)
//
// then the masking key (4 bytes) if MASK is set, then the payload.
const (
	finBit  = 0x80
	rsv1Bit = 0x40
	rsvBits = 0x70
	maskBit = 0x80

	maxControlPayload = 125
	maxHeader         = 14
)

// header is a parsed frame header.
type header struct {
	fin    bool
	rsv    byte // the RSV bits as they were, in place (0x70 mask)
	op     Opcode
	masked bool
	key    [4]byte
	length int64
}

// parseHeader parses the frame header at the start of b. It returns the
// header's size, or 0 if b does not hold all of it yet; err is
// ErrProtocol for a 64-bit length with its top bit set (section 5.2). A
// length not in its shortest form is accepted: the RFC obliges senders
// to use the shortest, and does not tell receivers to fail the others.
func parseHeader(b []byte, h *header) (n int, err error) {
	if len(b) < 2 {
		return 0, nil
	}
	h.fin = b[0]&finBit != 0
	h.rsv = b[0] & rsvBits
	h.op = Opcode(b[0] & 0x0f)
	h.masked = b[1]&maskBit != 0
	n = 2
	switch l := b[1] & 0x7f; l {
	case 126:
		if len(b) < 4 {
			return 0, nil
		}
		h.length = int64(binary.BigEndian.Uint16(b[2:]))
		n = 4
	case 127:
		if len(b) < 10 {
			return 0, nil
		}
		u := binary.BigEndian.Uint64(b[2:])
		if u>>63 != 0 {
			return 0, ErrProtocol
		}
		h.length = int64(u)
		n = 10
	default:
		h.length = int64(l)
	}
	if h.masked {
		if len(b) < n+4 {
			return 0, nil
		}
		copy(h.key[:], b[n:n+4])
		n += 4
	}
	return n, nil
}

// appendHeader appends a frame header; key is nil for an unmasked
// (server) frame.
func appendHeader(b []byte, fin bool, rsv byte, op Opcode, length int, key []byte) []byte {
	b0 := rsv | byte(op)
	if fin {
		b0 |= finBit
	}
	var mask byte
	if key != nil {
		mask = maskBit
	}
	switch {
	case length <= 125:
		b = append(b, b0, mask|byte(length))
	case length <= 0xffff:
		b = append(b, b0, mask|126, byte(length>>8), byte(length))
	default:
		b = append(b, b0, mask|127)
		b = binary.BigEndian.AppendUint64(b, uint64(length))
	}
	return append(b, key...)
}

// maskBytes XORs b with key, starting at position pos of the key, and
// returns the position after b (RFC 6455 section 5.3). It works a word
// at a time: masking is on every byte a server receives.
func maskBytes(key [4]byte, pos int, b []byte) int {
	pos &= 3
	i := 0
	for ; i < len(b) && pos != 0; i++ {
		b[i] ^= key[pos]
		pos = (pos + 1) & 3
	}
	// pos is 0 here if any bytes are left.
	if rest := b[i:]; len(rest) >= 8 {
		k32 := uint64(binary.LittleEndian.Uint32(key[:]))
		k := k32 | k32<<32
		for len(rest) >= 8 {
			binary.LittleEndian.PutUint64(rest, binary.LittleEndian.Uint64(rest)^k)
			rest = rest[8:]
			i += 8
		}
	}
	for ; i < len(b); i++ {
		b[i] ^= key[pos]
		pos = (pos + 1) & 3
	}
	return pos
}

// frameSize is the size of a frame with an n-byte payload.
func frameSize(n int, masked bool) int {
	s := 2 + n
	switch {
	case n > 0xffff:
		s += 8
	case n > 125:
		s += 2
	}
	if masked {
		s += 4
	}
	return s
}

// checkFrame applies RFC 6455's rules to a frame header before its
// payload is read, on either side: reserved opcodes and bits (RSV1 only
// on a message's first frame, and only with permessage-deflate), masking
// (every client frame, no server frame: fromClient), control frames
// (final, at most 125 bytes), the order of fragments (inMessage: a
// message's final frame is still to come), and the size of the message
// so far plus this frame against limit.
func checkFrame(h *header, fromClient, deflate, inMessage bool, have, limit int64) error {
	switch {
	case h.op > OpBinary && h.op < OpClose || h.op > OpPong:
		return fmt.Errorf("%w: reserved opcode %#x", ErrProtocol, byte(h.op))
	case h.rsv&^rsv1Bit != 0 || h.rsv != 0 && (!deflate || h.op == OpContinuation || h.op.control()):
		return fmt.Errorf("%w: reserved bits %#x on a %v frame", ErrProtocol, h.rsv>>4, h.op)
	case fromClient && !h.masked:
		return fmt.Errorf("%w: unmasked client frame", ErrProtocol)
	case !fromClient && h.masked:
		return fmt.Errorf("%w: masked server frame", ErrProtocol)
	case h.op.control() && !h.fin:
		return fmt.Errorf("%w: fragmented %v frame", ErrProtocol, h.op)
	case h.op.control() && h.length > maxControlPayload:
		return fmt.Errorf("%w: %v frame of %d bytes", ErrProtocol, h.op, h.length)
	case h.op == OpContinuation && !inMessage:
		return fmt.Errorf("%w: continuation frame without a message", ErrProtocol)
	case (h.op == OpText || h.op == OpBinary) && inMessage:
		return fmt.Errorf("%w: new message before the last one's final frame", ErrProtocol)
	case !h.op.control() && h.length > limit-have:
		return fmt.Errorf("%w: %d bytes, more than the limit of %d", ErrTooBig, have+h.length, limit)
	}
	return nil
}
