package hpack

import "fmt"

// A Decoder decodes the header blocks one peer sends on one connection
// (RFC 7541 3), keeping the dynamic table they build. It is not safe for
// concurrent use. A decoding error breaks the table's synchronisation
// with the peer's encoder: the connection must end with a
// COMPRESSION_ERROR (RFC 9113 4.3) and the Decoder be discarded.
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
}

// maxKeptBuf bounds the string buffer a Decoder keeps between literals.
const maxKeptBuf = 16 << 10

// NewDecoder returns a Decoder whose dynamic table has, and may grow to,
// maxDynamicTableSize bytes (RFC 7541 4.1 sizes), which for HTTP/2 is
// [DefaultDynamicTableSize] until a SETTINGS_HEADER_TABLE_SIZE of ours
// is acknowledged. Decode fails with [ErrListTooLarge] when a block's
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
// its name and value. An error from emit stops decoding and is returned
// as is; any other error matches one of the package's sentinels and is
// a connection error (COMPRESSION_ERROR).
func (d *Decoder) Decode(block []byte, emit func(f Field) error) error {
	p := block
	var listSize uint64
	atStart := true
	for len(p) > 0 {
		b := p[0]
		if b&0xe0 == 0x20 {
			// Dynamic table size update (RFC 7541 6.3), allowed only
			// before the first field (4.2).
			if !atStart {
				return fmt.Errorf("%w: size update after a field", ErrTableSize)
			}
			n, rest, err := readInt(p, 5)
			if err != nil {
				return err
			}
			if n > uint64(d.allowed) {
				return fmt.Errorf("%w: size %d above the allowed %d", ErrTableSize, n, d.allowed)
			}
			d.table.setMaxSize(uint32(n))
			d.needUpdate = false
			p = rest
			continue
		}
		if atStart && d.needUpdate {
			return fmt.Errorf("%w: block does not start with the size update a lowered limit requires", ErrTableSize)
		}
		atStart = false

		var f Field
		var err error
		switch {
		case b&0x80 != 0: // indexed field (6.1)
			var idx uint64
			idx, p, err = readInt(p, 7)
			if err != nil {
				return err
			}
			f, err = d.at(idx)
			if err != nil {
				return err
			}
			listSize += uint64(f.Size())
			if listSize > uint64(d.maxList) {
				return ErrListTooLarge
			}
		case b&0xc0 == 0x40: // literal with incremental indexing (6.2.1)
			f, p, err = d.literal(p, 6, &listSize)
			if err != nil {
				return err
			}
			d.table.add(f)
		default:
			// Literal without indexing (6.2.2, 0000) or never indexed
			// (6.2.3, 0001): both have a 4-bit name index.
			f, p, err = d.literal(p, 4, &listSize)
			if err != nil {
				return err
			}
			f.Sensitive = b&0x10 != 0
		}
		if err := emit(f); err != nil {
			return err
		}
	}
	if atStart && d.needUpdate {
		return fmt.Errorf("%w: block does not start with the size update a lowered limit requires", ErrTableSize)
	}
	return nil
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
// an n-bit prefix, adding its size to *listSize and failing before it
// allocates the strings if that exceeds the limit.
func (d *Decoder) literal(p []byte, n uint, listSize *uint64) (Field, []byte, error) {
	idx, p, err := readInt(p, n)
	if err != nil {
		return Field{}, p, err
	}
	budget := uint64(d.maxList) - min(*listSize+entryOverhead, uint64(d.maxList))
	var f Field
	buf := d.buf[:0]
	if idx != 0 {
		nf, err := d.at(idx)
		if err != nil {
			return Field{}, p, err
		}
		f.Name = nf.Name
		budget -= min(uint64(len(f.Name)), budget)
	} else {
		buf, p, err = readString(p, buf, budget)
		if err != nil {
			return Field{}, p, d.stringErr(err)
		}
		budget -= uint64(len(buf))
	}
	nameLen := len(buf)
	buf, p, err = readString(p, buf, budget)
	if err != nil {
		return Field{}, p, d.stringErr(err)
	}
	// Keep the buffer for the next literal unless one unusually long
	// literal grew it: a connection should not hold that much idle.
	if cap(buf) <= maxKeptBuf {
		d.buf = buf
	} else {
		d.buf = nil
	}
	*listSize += uint64(len(f.Name)) + uint64(len(buf)) + entryOverhead
	if *listSize > uint64(d.maxList) {
		return Field{}, p, ErrListTooLarge
	}
	// One allocation holds the name (when literal) and the value.
	s := string(buf)
	if idx == 0 {
		f.Name = s[:nameLen]
	}
	f.Value = s[nameLen:]
	return f, p, nil
}

// stringErr reports a string refused for its length as the list limit
// it would break.
func (d *Decoder) stringErr(err error) error {
	if err == errStringLength {
		return fmt.Errorf("%w: a string exceeds the limit of %d", ErrListTooLarge, d.maxList)
	}
	return err
}
