package ws

import (
	"compress/flate"
	"fmt"
	"sync"
	"unicode/utf8"
)

// PreparedMessage is a message encoded once for many connections
// (broadcast): its frame, and its compressed frame for the connections
// that agreed permessage-deflate, are built once, at the first write
// that needs each, and shared by every write after. This works because
// this package sends every message compressed on its own (no context
// takeover), so one compressed frame is valid on every connection.
type PreparedMessage struct {
	op    Opcode
	data  []byte
	plain []byte // the uncompressed frame

	mu         sync.Mutex
	compressed [flate.BestCompression - flate.HuffmanOnly + 1][]byte // frames by level
}

// NewPreparedMessage prepares data as a message with opcode op (OpText,
// data UTF-8, or OpBinary). data must not change afterwards.
func NewPreparedMessage(op Opcode, data []byte) (*PreparedMessage, error) {
	if op != OpText && op != OpBinary {
		return nil, fmt.Errorf("%w: NewPreparedMessage with opcode %v", ErrInvalid, op)
	}
	if op == OpText && !utf8.Valid(data) {
		return nil, fmt.Errorf("%w: text message is not UTF-8", ErrInvalid)
	}
	frame := appendHeader(make([]byte, 0, frameSize(len(data), false)), true, 0, op, len(data), nil)
	return &PreparedMessage{op: op, data: data, plain: append(frame, data...)}, nil
}

// frame returns m's compressed frame at level, compressing it the first
// time.
func (m *PreparedMessage) frame(cs *compressors, level int) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	f := &m.compressed[level-flate.HuffmanOnly]
	if *f == nil {
		z, err := cs.compress(nil, m.data, level)
		if err != nil {
			return nil, err
		}
		frame := appendHeader(make([]byte, 0, frameSize(len(z), false)), true, rsv1Bit, m.op, len(z), nil)
		*f = append(frame, z...)
	}
	return *f, nil
}

// WritePrepared sends a prepared message, as WriteMessage would send its
// data, without encoding it again.
func (w *Conn) WritePrepared(m *PreparedMessage) error {
	frame := m.plain
	if w.deflate && len(m.data) >= minCompress {
		var err error
		if frame, err = m.frame(&w.u.comp, w.level()); err != nil {
			return err
		}
	}
	return w.writeRaw(frame, nil, false)
}
