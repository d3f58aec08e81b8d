package h1

import (
	"bytes"
	"io"
)

// Default limits of a ChunkedDecoder, used where its field is zero or
// negative.
const (
	// DefaultMaxLineBytes is net/http's limit on a chunk line.
	DefaultMaxLineBytes = 4096
	// DefaultMaxTrailerBytes bounds the trailer section.
	DefaultMaxTrailerBytes = 64 << 10
)

// ChunkedDecoder decodes a body in the chunked transfer coding (RFC 9112
// section 7.1). Set its limits, then call Decode until it returns io.EOF or
// an error. The zero value decodes without a body limit.
//
// What it accepts, strictly: chunk-size is 1 to 16 hex digits whose value
// fits int64; chunk extensions follow section 7.1.1's grammar exactly,
// *( BWS ";" BWS token [ BWS "=" BWS ( token / quoted-string ) ] ), and are
// ignored; nothing else may follow chunk-size, not even whitespace without a
// ";" (net/http takes trailing whitespace and ignores anything after ";").
// Every line ends in CRLF: a bare LF or CR is refused. Chunk data is
// followed by CRLF. The trailer section's field lines obey the head's rules
// (no obs-fold, no whitespace before the colon, no controls in values) and
// are returned in Trailers, framing fields and all: RFC 9110 section 6.5.1
// forbids merging them into the head, which is the caller's business.
type ChunkedDecoder struct {
	// MaxBodyBytes bounds the decoded body: ErrBodyTooLarge (413) once a
	// chunk-size would take it beyond. Zero or negative: no limit.
	MaxBodyBytes int64
	// MaxLineBytes bounds a chunk line, extensions included.
	MaxLineBytes int
	// MaxTrailerBytes bounds the trailer section: ErrHeaderTooLarge beyond.
	MaxTrailerBytes int
	// MaxTrailers bounds the trailer fields: ErrTooManyFields beyond.
	// Zero or negative: DefaultMaxFields.
	MaxTrailers int

	// Trailers are the trailer fields, set when Decode returns io.EOF.
	// They point into the src of that last call.
	Trailers []Field

	state     uint8
	remaining int64 // data bytes left in the current chunk
	total     int64 // data bytes announced so far
	tpos      int   // trailer section: the first line not yet parsed
	tfields   []fieldSpan
}

const (
	chunkSize    = iota // expecting a chunk line
	chunkData           // inside chunk data
	chunkCRLF           // expecting the CRLF after chunk data
	chunkTrailer        // inside the trailer section
	chunkDone           // the body has ended
)

// Reset makes d ready for another body, keeping its limits and capacity.
func (d *ChunkedDecoder) Reset() {
	d.state, d.remaining, d.total, d.tpos = chunkSize, 0, 0, 0
	d.Trailers, d.tfields = d.Trailers[:0], d.tfields[:0]
}

// Decode decodes from the start of src, which continues where the bytes
// consumed by the previous call ended. It returns the number of bytes of
// src it consumed and, with a nil error, the next run of body data, a
// non-empty subslice of src[:n]. With ErrIncomplete, n bytes of framing were
// consumed and src[n:] is the start of something not complete yet: call
// again with it followed by more bytes. With io.EOF
// the body and its trailer section have ended at src[n]; Trailers are set.
// Any other error is final.
func (d *ChunkedDecoder) Decode(src []byte) (data []byte, n int, err error) {
	maxLine := d.MaxLineBytes
	if maxLine <= 0 {
		maxLine = DefaultMaxLineBytes
	}
	for {
		switch d.state {
		case chunkSize:
			i := bytes.IndexByte(src[n:], '\n')
			if i < 0 {
				if len(src)-n > maxLine {
					return nil, n, ErrChunkLineTooLong
				}
				return nil, n, ErrIncomplete
			}
			if i > maxLine {
				return nil, n, ErrChunkLineTooLong
			}
			line, err := crlfLine(src, n, i)
			if err != nil {
				return nil, n, err
			}
			size, err := parseChunkLine(line)
			if err != nil {
				return nil, n, err
			}
			n += i + 1
			if size == 0 {
				d.state = chunkTrailer
				continue
			}
			if d.MaxBodyBytes > 0 && size > d.MaxBodyBytes-d.total {
				return nil, n, ErrBodyTooLarge
			}
			d.total += size
			d.remaining, d.state = size, chunkData
		case chunkData:
			if n == len(src) {
				return nil, n, ErrIncomplete
			}
			k := len(src) - n
			if int64(k) > d.remaining {
				k = int(d.remaining)
			}
			d.remaining -= int64(k)
			if d.remaining == 0 {
				d.state = chunkCRLF
			}
			return src[n : n+k], n + k, nil
		case chunkCRLF:
			switch len(src) - n {
			case 0:
				return nil, n, ErrIncomplete
			case 1:
				if src[n] != '\r' {
					return nil, n, ErrBadChunkData
				}
				return nil, n, ErrIncomplete
			}
			if src[n] != '\r' || src[n+1] != '\n' {
				return nil, n, ErrBadChunkData
			}
			n += 2
			d.state = chunkSize
		case chunkTrailer:
			m, err := d.trailer(src[n:])
			return nil, n + m, err
		default:
			return nil, n, io.EOF
		}
	}
}

// trailer parses the trailer section (RFC 9112 section 7.1.2) from the
// start of src, resuming after the lines an earlier call parsed: none of it
// is consumed until all of it is there, so its fields stay slices of one src.
func (d *ChunkedDecoder) trailer(src []byte) (int, error) {
	limit := d.MaxTrailerBytes
	if limit <= 0 {
		limit = DefaultMaxTrailerBytes
	}
	maxFields := d.MaxTrailers
	if maxFields <= 0 {
		maxFields = DefaultMaxFields
	}
	win := src
	if len(win) > limit {
		win = win[:limit]
	}
	if d.tpos > len(win) {
		d.tpos, d.tfields = 0, d.tfields[:0] // not what the last call saw
	}
	for {
		i := bytes.IndexByte(win[d.tpos:], '\n')
		if i < 0 {
			if len(src) >= limit {
				return 0, ErrHeaderTooLarge
			}
			return 0, ErrIncomplete
		}
		line, err := crlfLine(win, d.tpos, i)
		if err != nil {
			return 0, err
		}
		start := d.tpos
		d.tpos += i + 1
		if len(line) == 0 {
			break
		}
		if len(d.tfields) == maxFields {
			return 0, ErrTooManyFields
		}
		f, err := parseField(line, start)
		if err != nil {
			return 0, err
		}
		d.tfields = append(d.tfields, f)
	}
	d.Trailers = d.Trailers[:0]
	for _, f := range d.tfields {
		d.Trailers = append(d.Trailers, Field{src[f.name.lo:f.name.hi], src[f.value.lo:f.value.hi]})
	}
	d.state = chunkDone
	return d.tpos, io.EOF
}

// parseChunkLine parses chunk-size [ chunk-ext ] (RFC 9112 section 7.1),
// the line without its CRLF, and returns the size.
func parseChunkLine(line []byte) (int64, error) {
	i := 0
	var size int64
	for ; i < len(line) && isHex(line[i]); i++ {
		if i == 16 {
			return 0, ErrBadChunkSize
		}
		size = size<<4 | int64(unhex(line[i]))
	}
	// Sixteen digits may exceed int64: the shift wrapped it negative.
	if i == 0 || size < 0 {
		return 0, ErrBadChunkSize
	}
	if i < len(line) && line[i] != ';' && line[i] != ' ' && line[i] != '\t' {
		return 0, ErrBadChunkSize
	}
	for i < len(line) {
		// BWS ";" BWS chunk-ext-name
		i = skipBWS(line, i)
		if i == len(line) || line[i] != ';' {
			return 0, ErrBadChunkExtension
		}
		i = skipBWS(line, i+1)
		j := i
		for j < len(line) && isTchar[line[j]] {
			j++
		}
		if j == i {
			return 0, ErrBadChunkExtension
		}
		i = j
		// [ BWS "=" BWS chunk-ext-val ]
		if k := skipBWS(line, i); k < len(line) && line[k] == '=' {
			i = skipBWS(line, k+1)
			if i < len(line) && line[i] == '"' {
				j = quotedStringEnd(line, i)
				if j < 0 {
					return 0, ErrBadChunkExtension
				}
			} else {
				for j = i; j < len(line) && isTchar[line[j]]; j++ {
				}
				if j == i {
					return 0, ErrBadChunkExtension
				}
			}
			i = j
		}
	}
	return size, nil
}

// quotedStringEnd returns the index just past the quoted-string that starts
// at b[i] (RFC 9110 section 5.6.4), or -1.
func quotedStringEnd(b []byte, i int) int {
	for i++; i < len(b); i++ {
		switch c := b[i]; {
		case c == '"':
			return i + 1
		case c == '\\':
			i++
			if i == len(b) || !isFieldByte[b[i]] {
				return -1
			}
		case !isFieldByte[c]:
			return -1
		}
	}
	return -1
}

func skipBWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t') {
		i++
	}
	return i
}

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c <= 'F':
		return c - 'A' + 10
	}
	return c - 'a' + 10
}
