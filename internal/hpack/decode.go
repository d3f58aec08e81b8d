package hpack

import "fmt"

// A Decoder decodes the header blocks one peer sends on one connection
// (RFC 7541 3), keeping the dynamic table they build. It is not safe for
// concurrent use. A decoding error breaks the table's synchronisation
// with the peer's encoder: the connection must end with a
// COMPRESSION_ERROR (RFC 9113 4.3). [ErrListTooLarge] and the errors of
// the caller's emit function do not (see [Decoder.Decode]).
type Decoder struct {
	table dynamicTable
	// allowed is the largest dynamic table size the peer's encoder may
	// choose: our SETTINGS_HEADER_TABLE_SIZE.
	allowed uint32
	// needUpdate records that allowed fell below the table's size, so
	// the next block must begin with a size update (RFC 7541 4.2).
	needUpdate bool
	maxList    uint32
	buf        []byte // decoded strings of the current literal
	// broken is the decoding error that made the table unusable,
	// returned again by every later Decode.
	broken error
}

// maxKeptBuf bounds the string buffer a Decoder keeps between literals,
// and so while its connection is idle.
const maxKeptBuf = 512

// NewDecoder returns a Decoder whose dynamic table has, and may grow to,
// maxDynamicTableSize bytes (RFC 7541 4.1 sizes), which for HTTP/2 is
// [DefaultDynamicTableSize] until a SETTINGS_HEADER_TABLE_SIZE of ours
// is acknowledged. Decode reports [ErrListTooLarge] when a block's
// fields add up to more than maxHeaderListSize; zero means
// [DefaultMaxHeaderListSize].
func NewDecoder(maxDynamicTableSize, maxHeaderListSize uint32) *Decoder {
	if maxHeaderListSize == 0 {
		maxHeaderListSize = DefaultMaxHeaderListSize
	}
	d := &Decoder{allowed: maxDynamicTableSize, maxList: maxHeaderListSize}
	d.table.maxSize = maxDynamicTableSize
	return d
}

// SetMaxDynamicTableSize sets the largest dynamic table size the peer's
// encoder may choose with a size update. Call it when the peer
// acknowledges a SETTINGS frame carrying SETTINGS_HEADER_TABLE_SIZE = n:
// from then on the peer encodes under the new limit. If n is below the
// current table size, the next block must start with a size update to
// at most n (RFC 7541 4.2), or Decode fails with [ErrTableSize].
func (d *Decoder) SetMaxDynamicTableSize(n uint32) {
	d.allowed = n
	if n < d.table.maxSize {
		d.needUpdate = true
	}
}

// SetMaxHeaderListSize sets the header list size limit; zero means
// [DefaultMaxHeaderListSize].
func (d *Decoder) SetMaxHeaderListSize(n uint32) {
	if n == 0 {
		n = DefaultMaxHeaderListSize
	}
	d.maxList = n
}

// Decode decodes one complete header block (the fragments of a HEADERS
// or PUSH_PROMISE frame and its CONTINUATION frames, joined) and calls
// emit with each field in order. Fields of indexed representations are
// passed without allocation; each literal costs one allocation, holding
// its name and value.
//
// When emit returns an error, or the fields exceed the header list size
// limit, Decode stops emitting but decodes the rest of the block, so the
// dynamic table stays in step with the peer's encoder, and then returns
// emit's error or one matching [ErrListTooLarge]. Those two leave the
// Decoder usable: the caller may refuse just the stream (for an
// oversized list, RFC 9113 10.5.1 suggests a 431 response). Any other
// error matches one of the package's sentinels and is a connection
// error (COMPRESSION_ERROR): it is returned at once, and again by every
// later call, as the table is no longer in step.
func (d *Decoder) Decode(block []byte, emit func(f Field) error) error {
	if d.broken != nil {
		return d.broken
	}
	stop, err := d.decode(block, emit)
	if err != nil {
		d.broken = err
		return err
	}
	return stop
}

// decode is Decode, returning separately the error that stopped the
// emitting and a decoding error. Once stop is set no more fields are
// emitted, but decoding goes on: the rest of the block must still
// update the dynamic table.
func (d *Decoder) decode(block []byte, emit func(f Field) error) (stop, err error) {
	p := block
	var listSize uint64
	atStart := true
	for len(p) > 0 {
		b := p[0]
		if b&0xe0 == 0x20 {
			// Dynamic table size update (RFC 7541 6.3), allowed only
			// before the first field (4.2).
			if !atStart {
				return nil, fmt.Errorf("%w: size update after a field", ErrTableSize)
			}
			n, rest, err := readInt(p, 5)
			if err != nil {
				return nil, err
			}
			if n > uint64(d.allowed) {
				return nil, fmt.Errorf("%w: size %d above the allowed %d", ErrTableSize, n, d.allowed)
			}
			d.table.setMaxSize(uint32(n))
			d.needUpdate = false
			p = rest
			continue
		}
		if atStart && d.needUpdate {
			return nil, fmt.Errorf("%w: block does not start with the size update a lowered limit requires", ErrTableSize)
		}
		atStart = false

		switch {
		case b&0x80 != 0: // indexed field (6.1)
			idx, rest, err := readInt(p, 7)
			if err != nil {
				return nil, err
			}
			p = rest
			f, err := d.at(idx)
			if err != nil {
				return nil, err
			}
			if stop != nil {
				// Nothing to do: an indexed field changes no table, and
				// so a bomb of references costs nothing once stopped.
				continue
			}
			listSize += uint64(f.Size())
			if listSize > uint64(d.maxList) {
				stop = d.tooLarge()
				continue
			}
			stop = emit(f)
		default:
			// Literal with incremental indexing (6.2.1, 01, 6-bit name
			// index), without indexing (6.2.2, 0000) or never indexed
			// (6.2.3, 0001; both 4-bit).
			indexing := b&0xc0 == 0x40
			n := uint(4)
			if indexing {
				n = 6
			}
			rest, err := d.literal(p, n, indexing, b&0xf0 == 0x10, &listSize, &stop, emit)
			if err != nil {
				return nil, err
			}
			p = rest
		}
	}
	if atStart && d.needUpdate {
		return nil, fmt.Errorf("%w: block does not start with the size update a lowered limit requires", ErrTableSize)
	}
	return stop, nil
}

// tooLarge returns the error of a header list beyond the limit.
func (d *Decoder) tooLarge() error {
	return fmt.Errorf("%w: limit %d", ErrListTooLarge, d.maxList)
}

// at returns the field of index idx across the static and dynamic
// tables (RFC 7541 2.3.3).
func (d *Decoder) at(idx uint64) (Field, error) {
	if idx == 0 {
		return Field{}, fmt.Errorf("%w: 0", ErrIndex)
	}
	if idx <= staticLen {
		return staticTable[idx-1], nil
	}
	if di := idx - staticLen; di <= uint64(d.table.len()) {
		return d.table.at(int(di)), nil
	}
	return Field{}, fmt.Errorf("%w: %d beyond %d entries", ErrIndex, idx, staticLen+uint64(d.table.len()))
}

// literal decodes a literal field representation whose name index has
// an n-bit prefix. Unless decoding has stopped (*stop != nil) it counts
// the field in *listSize and emits it, or stops with ErrListTooLarge if
// it does not fit. It inserts the field into the dynamic table when
// indexing, stopped or not, so the table stays in step with the
// encoder's. Strings are allocated only for a field emitted or
// inserted, so after a stop only the table's size bounds allocation.
func (d *Decoder) literal(p []byte, n uint, indexing, sensitive bool, listSize *uint64, stop *error, emit func(Field) error) ([]byte, error) {
	idx, p, err := readInt(p, n)
	if err != nil {
		return p, err
	}
	var f Field
	buf := d.buf[:0]
	if idx != 0 {
		nf, err := d.at(idx)
		if err != nil {
			return p, err
		}
		f.Name = nf.Name
	} else {
		buf, p, err = readString(p, buf)
		if err != nil {
			return p, err
		}
	}
	nameLen := len(buf)
	buf, p, err = readString(p, buf)
	if err != nil {
		return p, err
	}
	// Keep the buffer for the next literal unless one unusually long
	// literal grew it: a connection should not hold that much idle.
	if cap(buf) <= maxKeptBuf {
		d.buf = buf
	} else {
		d.buf = nil
	}

	size := uint64(len(f.Name)) + uint64(len(buf)) + entryOverhead
	emitting := *stop == nil
	if emitting {
		*listSize += size
		if *listSize > uint64(d.maxList) {
			*stop = d.tooLarge()
			emitting = false
		}
	}
	storing := indexing && size <= uint64(d.table.maxSize)
	if emitting || storing {
		// One allocation holds the name (when literal) and the value.
		s := string(buf)
		if idx == 0 {
			f.Name = s[:nameLen]
		}
		f.Value = s[nameLen:]
	}
	if indexing {
		if storing {
			d.table.add(f)
		} else {
			// Larger than the table: inserting it empties the table
			// (RFC 7541 4.4), for which its size is enough.
			d.table.evict(d.table.maxSize + 1)
		}
	}
	if emitting {
		f.Sensitive = sensitive
		*stop = emit(f)
	}
	return p, nil
}
