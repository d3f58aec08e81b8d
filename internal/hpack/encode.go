package hpack

// An Encoder encodes the header blocks sent on one connection (RFC 7541
// 3), keeping the dynamic table the peer's decoder mirrors. It is not
// safe for concurrent use, and the blocks it produces must reach the
// peer in the order they were encoded.
//
// Its choices: a field equal to a table entry is sent as an index; any
// other field is sent as a literal with incremental indexing, naming it
// by index when a table has the name (the static table first, for the
// shorter index); a [Field.Sensitive] field is always a never-indexed
// literal (RFC 7541 7.1.3), and a field larger than the whole dynamic
// table a literal without indexing, since inserting it would only empty
// the table (4.4). Strings are Huffman coded when that is shorter.
type Encoder struct {
	table dynamicTable
	// pending records a size change not yet signalled; minSize is the
	// smallest size set since the last signal, which the peer must see
	// too if it was below the final one, for its evictions (RFC 7541
	// 4.2).
	pending bool
	minSize uint32
	// noHuffman disables Huffman coding, for tests reproducing the
	// RFC's examples without it.
	noHuffman bool
}

// NewEncoder returns an Encoder with a dynamic table of
// [DefaultDynamicTableSize] bytes, the size both HTTP/2 peers assume
// before any SETTINGS (RFC 9113 6.5.2).
func NewEncoder() *Encoder {
	e := &Encoder{}
	e.table.maxSize = DefaultDynamicTableSize
	return e
}

// SetMaxDynamicTableSize changes the dynamic table size to n, which must
// not exceed the peer's SETTINGS_HEADER_TABLE_SIZE. The change is
// signalled by a size update (RFC 7541 6.3) at the start of the next
// field appended, so call it between header blocks, never within one.
// A server typically calls it with min(the peer's setting, its own
// preferred size) when the peer's SETTINGS arrive.
func (e *Encoder) SetMaxDynamicTableSize(n uint32) {
	if !e.pending || n < e.minSize {
		e.minSize = n
	}
	e.pending = true
	e.table.setMaxSize(n)
}

// MaxDynamicTableSize returns the current dynamic table size limit.
func (e *Encoder) MaxDynamicTableSize() uint32 { return e.table.maxSize }

// AppendField appends the representation of f to dst and returns the
// extended slice, preceded by a pending size update when f begins a
// header block.
func (e *Encoder) AppendField(dst []byte, f Field) []byte {
	if e.pending {
		if e.minSize < e.table.maxSize {
			dst = appendInt(dst, 0x20, 5, uint64(e.minSize))
		}
		dst = appendInt(dst, 0x20, 5, uint64(e.table.maxSize))
		e.pending = false
	}

	nameIdx, exact := staticSearch(f)
	inStatic := nameIdx != 0
	if !f.Sensitive {
		if exact {
			return appendInt(dst, 0x80, 7, nameIdx)
		}
		if idx, exact := e.table.search(f); exact {
			return appendInt(dst, 0x80, 7, staticLen+uint64(idx))
		} else if !inStatic && idx != 0 {
			nameIdx = staticLen + uint64(idx)
		}
	} else if !inStatic {
		if idx, _ := e.table.search(f); idx != 0 {
			nameIdx = staticLen + uint64(idx)
		}
	}

	switch {
	case f.Sensitive: // never indexed (6.2.3)
		dst = appendInt(dst, 0x10, 4, nameIdx)
	case f.Size() > e.table.maxSize: // without indexing (6.2.2)
		dst = appendInt(dst, 0x00, 4, nameIdx)
	default: // incremental indexing (6.2.1)
		dst = appendInt(dst, 0x40, 6, nameIdx)
		e.table.add(Field{Name: f.Name, Value: f.Value})
	}
	if nameIdx == 0 {
		dst = appendString(dst, f.Name, !e.noHuffman)
	}
	return appendString(dst, f.Value, !e.noHuffman)
}
