// Package hpack implements HPACK, the header compression format of
// HTTP/2 (RFC 7541).
//
// A [Decoder] turns header blocks into [Field] values and an [Encoder]
// turns fields into header blocks. Each keeps the dynamic table of one
// direction of one connection, so a connection needs one of each, used
// by one goroutine at a time, and every header block of a connection must
// pass through them in the order the frames carry them.
//
// Guarantees:
//
//   - The Decoder never panics on any input and reports every malformed
//     block with an error matching one of the sentinel errors below
//     (errors.Is). A decoding error leaves the dynamic table in an
//     unknown state, so for HTTP/2 it is a connection error of type
//     COMPRESSION_ERROR (RFC 9113 4.3): the caller must close the
//     connection, not just reset the stream.
//   - The Decoder enforces a limit on the decoded header list size (RFC
//     9113 6.5.2, SETTINGS_MAX_HEADER_LIST_SIZE) as it goes: past it, it
//     emits no more fields and allocates only for entries it must insert
//     into the dynamic table, so a small block that references a large
//     table entry many times costs neither the expanded size in memory
//     nor the connection; Decode then reports [ErrListTooLarge].
//   - The dynamic tables never exceed the size the peer was allowed (RFC
//     7541 4.2, 4.4).
//   - The strings of decoded fields are ordinary immutable strings the
//     caller may keep.
//
// It does not check that names and values are valid HTTP/2 fields
// (lowercase names, no CR, LF or NUL: RFC 9113 8.2.1); that is the
// HTTP/2 layer's job, which must treat a violation as a malformed
// request rather than a compression error.
package hpack

import "errors"

// Field is one header field: a name and a value.
type Field struct {
	Name, Value string

	// Sensitive marks a field that must never enter a dynamic table,
	// on this hop or any later one (RFC 7541 6.2.3, 7.1.3), such as a
	// cookie or an authorization with little entropy. The Encoder sends
	// it as a never-indexed literal; the Decoder sets it on fields that
	// arrived as one, so a proxy can keep the marking.
	Sensitive bool
}

// Size returns the size of f as RFC 7541 4.1 defines it: the lengths of
// the name and the value plus 32. Dynamic table sizes and the header
// list size limit are both counted in this unit.
func (f Field) Size() uint32 {
	return uint32(len(f.Name)) + uint32(len(f.Value)) + entryOverhead
}

// entryOverhead is the per-entry cost RFC 7541 4.1 adds to the name and
// value lengths, an estimate of an implementation's bookkeeping.
const entryOverhead = 32

// DefaultDynamicTableSize is the initial size of both dynamic tables of
// an HTTP/2 connection, the initial value of SETTINGS_HEADER_TABLE_SIZE
// (RFC 9113 6.5.2).
const DefaultDynamicTableSize = 4096

// DefaultMaxHeaderListSize is the header list size limit a [Decoder]
// created with a zero limit uses: 1 MiB, as net/http's
// DefaultMaxHeaderBytes.
const DefaultMaxHeaderListSize = 1 << 20

// Errors a Decoder returns, each wrapped with detail; test with
// errors.Is. All but ErrListTooLarge are a COMPRESSION_ERROR for HTTP/2.
var (
	// ErrIndex reports an indexed representation whose index is 0 or
	// beyond the static and dynamic tables (RFC 7541 2.3.3).
	ErrIndex = errors.New("hpack: invalid table index")

	// ErrHuffman reports a Huffman-coded string that is not valid: it
	// contains EOS, or its padding is longer than 7 bits or not the
	// most significant bits of EOS (RFC 7541 5.2).
	ErrHuffman = errors.New("hpack: invalid Huffman-coded string")

	// ErrInteger reports an integer too large for this implementation
	// (RFC 7541 5.1 leaves the limit to it).
	ErrInteger = errors.New("hpack: integer overflow")

	// ErrTableSize reports a dynamic table size update above the limit
	// the decoder allows, one not at the start of the header block, or
	// a missing one that a lowered limit required (RFC 7541 4.2, 6.3).
	ErrTableSize = errors.New("hpack: invalid dynamic table size update")

	// ErrListTooLarge reports a header block whose fields add up to
	// more than the decoder's header list size limit. Unlike the other
	// errors it is not a compression error: the block was decoded to
	// its end, the dynamic table is in step and the Decoder usable.
	ErrListTooLarge = errors.New("hpack: header list too large")

	// ErrTruncated reports a header block that ends inside a
	// representation: an integer, a string length or a string.
	ErrTruncated = errors.New("hpack: truncated header block")
)
