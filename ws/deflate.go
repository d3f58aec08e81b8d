package ws

import (
	"bytes"
	"compress/flate"
	"errors"
	"io"
	"strconv"
	"strings"
	"sync"
)

// permessage-deflate (RFC 7692): a message's payload is compressed with
// DEFLATE (RFC 1951), flushed with an empty stored block whose four
// bytes 00 00 FF FF are then left off, and its first frame has RSV1 set.
// "Context takeover" lets a message refer to the bytes of the messages
// before it, within the LZ77 window (up to 32 KiB), so each side keeps
// the window between messages.
//
// What this package does with it:
//
//   - It sends every message compressed on its own
//     (server_no_context_takeover, which a server may always declare):
//     no compressor is kept per connection (Go's costs about a megabyte),
//     and one compressed frame serves every connection (PreparedMessage).
//   - It receives without context takeover too unless
//     Upgrader.ContextTakeover is set (the server may declare
//     client_no_context_takeover in any answer); with it, a connection
//     keeps the last 32 KiB it inflated, its memory bound.
//   - A client asking for server_max_window_bits below 15 gets messages
//     compressed with Huffman codes only (no back-references at all, so
//     any window is respected): Go's compressor has no smaller window.
const deflateName = "permessage-deflate"

// deflateTail ends a compressed message: the 00 00 FF FF left off by the
// sender, then an empty final stored block, so that the decompressor
// reports io.EOF instead of io.ErrUnexpectedEOF.
var deflateTail = []byte{0x00, 0x00, 0xff, 0xff, 0x01, 0x00, 0x00, 0xff, 0xff}

// windowSize is DEFLATE's largest window, what context takeover keeps.
const windowSize = 32 << 10

// minCompress is the smallest message worth compressing: below it the
// deflate block's own overhead outweighs what it saves.
const minCompress = 64

// compressedLimit bounds a compressed message whose inflated size is
// bounded by limit: DEFLATE can make incompressible data a little larger
// (a stored block's 5 bytes per 64 KiB; a few more with Huffman codes), so
// a message of exactly the limit, compressed by any peer, must pass.
func compressedLimit(limit int64) int64 { return limit + limit>>6 + 1024 }

// deflateParams is a negotiated permessage-deflate.
type deflateParams struct {
	// serverNoTakeover and clientNoTakeover: the side does not keep its
	// window between messages.
	serverNoTakeover, clientNoTakeover bool
	// serverBits, clientBits: the window sizes, 8-15 (15 when absent).
	serverBits, clientBits int
	// serverBitsAsked: the offer named server_max_window_bits, so the
	// answer must name it too, even at 15, to accept the offer (RFC 7692
	// section 7.1.2.1); leaving it out answers a different offer.
	serverBitsAsked bool
}

// extension is one element of a Sec-WebSocket-Extensions list: a name
// and its parameters in order, a parameter without value having "".
type extension struct {
	name   string
	params [][2]string
}

// parseExtensions parses Sec-WebSocket-Extensions values (RFC 6455
// section 9.1: a comma-separated list of tokens, each with ";"-separated
// parameters whose values are tokens or quoted strings). It reports
// false for a malformed list.
func parseExtensions(values []string) ([]extension, bool) {
	var exts []extension
	for _, v := range values {
		for _, item := range splitOutsideQuotes(v, ',') {
			item = strings.TrimSpace(item)
			if item == "" {
				continue
			}
			parts := splitOutsideQuotes(item, ';')
			e := extension{name: strings.TrimSpace(parts[0])}
			if !isToken(e.name) {
				return nil, false
			}
			for _, p := range parts[1:] {
				k, val, hasVal := strings.Cut(p, "=")
				k, val = strings.TrimSpace(k), strings.TrimSpace(val)
				if !isToken(k) {
					return nil, false
				}
				if hasVal {
					if len(val) >= 2 && val[0] == '"' && val[len(val)-1] == '"' {
						val = val[1 : len(val)-1]
					}
					if !isToken(val) {
						return nil, false
					}
				}
				e.params = append(e.params, [2]string{k, val})
			}
			exts = append(exts, e)
		}
	}
	return exts, true
}

// splitOutsideQuotes splits s at sep, except inside double quotes.
func splitOutsideQuotes(s string, sep byte) []string {
	var out []string
	quoted, start := false, 0
	for i := 0; i < len(s); i++ {
		switch {
		case s[i] == '"':
			quoted = !quoted
		case s[i] == sep && !quoted:
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return append(out, s[start:])
}

// isToken reports an RFC 9110 token.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return true
}

// deflateOffer reads one permessage-deflate offer (a client's) or answer
// (a server's). It reports false for parameters that are unknown,
// repeated or out of range: the offer is declined (RFC 7692 section 5.1).
// A client's client_max_window_bits may have no value.
func deflateOffer(e extension) (deflateParams, bool) {
	p := deflateParams{serverBits: 15, clientBits: 15}
	seen := map[string]bool{}
	for _, kv := range e.params {
		k, v := kv[0], kv[1]
		if seen[k] {
			return p, false
		}
		seen[k] = true
		switch k {
		case "server_no_context_takeover", "client_no_context_takeover":
			if v != "" {
				return p, false
			}
			if k[0] == 's' {
				p.serverNoTakeover = true
			} else {
				p.clientNoTakeover = true
			}
		case "server_max_window_bits", "client_max_window_bits":
			if v == "" && k[0] == 'c' {
				continue
			}
			n, err := strconv.Atoi(v)
			if err != nil || n < 8 || n > 15 || strconv.Itoa(n) != v {
				return p, false
			}
			if k[0] == 's' {
				p.serverBits, p.serverBitsAsked = n, true
			} else {
				p.clientBits = n
			}
		default:
			return p, false
		}
	}
	return p, true
}

// answer is the server's Sec-WebSocket-Extensions value accepting p,
// after acceptOffer has settled it.
func (p deflateParams) answer() string {
	s := deflateName + "; server_no_context_takeover"
	if p.clientNoTakeover {
		s += "; client_no_context_takeover"
	}
	if p.serverBits < 15 || p.serverBitsAsked {
		s += "; server_max_window_bits=" + strconv.Itoa(p.serverBits)
	}
	return s
}

// compressors pools Go's DEFLATE compressors by level: each is about a
// megabyte, so none is kept per connection.
type compressors struct {
	pools [flate.BestCompression - flate.HuffmanOnly + 1]sync.Pool
}

var errNoSyncMarker = errors.New("ws: compressor did not end with a sync flush")

// compress appends to dst p compressed at level as one message of
// permessage-deflate: a stream of its own, without the final 00 00 FF FF.
func (cs *compressors) compress(dst, p []byte, level int) ([]byte, error) {
	pool := &cs.pools[level-flate.HuffmanOnly]
	buf := bytes.NewBuffer(dst)
	w, _ := pool.Get().(*flate.Writer)
	if w == nil {
		var err error
		if w, err = flate.NewWriter(buf, level); err != nil {
			return dst, err
		}
	} else {
		w.Reset(buf)
	}
	_, err := w.Write(p)
	if err == nil {
		err = w.Flush()
	}
	w.Reset(io.Discard) // drop the reference to buf before pooling
	pool.Put(w)
	out := buf.Bytes()
	if err != nil {
		return dst, err
	}
	if !bytes.HasSuffix(out, deflateTail[:4]) {
		return dst, errNoSyncMarker
	}
	return out[:len(out)-4], nil
}

// decompressors pools Go's DEFLATE decompressors (about 40 KiB each).
type decompressors struct{ pool sync.Pool }

type inflater struct {
	r   io.ReadCloser
	src bytes.Reader
	mr  io.Reader
}

// decompress appends to dst the message compressed in p, using dict as
// the window left by the messages before (nil without context takeover).
// It returns ErrTooBig once the output would pass limit bytes (a
// compression bomb stops there, having inflated no more than that), and
// ErrProtocol for input that is not valid DEFLATE.
func (ds *decompressors) decompress(dst, p, dict []byte, limit int64) ([]byte, error) {
	in, _ := ds.pool.Get().(*inflater)
	if in == nil {
		in = &inflater{}
		in.mr = io.MultiReader(&in.src, bytes.NewReader(deflateTail))
	}
	in.src.Reset(p)
	in.mr = io.MultiReader(&in.src, bytes.NewReader(deflateTail))
	if in.r == nil {
		in.r = flate.NewReader(in.mr)
	}
	in.r.(flate.Resetter).Reset(in.mr, dict)
	defer func() {
		in.src.Reset(nil)
		ds.pool.Put(in)
	}()
	start := len(dst)
	for {
		if len(dst) == cap(dst) {
			dst = append(dst, 0)[:len(dst)]
		}
		room := dst[len(dst):cap(dst)]
		if over := int64(len(dst)-start+len(room)) - limit - 1; over > 0 {
			room = room[:int64(len(room))-over]
		}
		n, err := in.r.Read(room)
		dst = dst[:len(dst)+n]
		if int64(len(dst)-start) > limit {
			return dst[:start], ErrTooBig
		}
		if err == io.EOF {
			return dst, nil
		}
		if err != nil {
			return dst[:start], ErrProtocol
		}
	}
}

// keepWindow returns dict updated with msg, the bytes a message just
// inflated: the last windowSize bytes of both, in dict's storage.
func keepWindow(dict, msg []byte) []byte {
	if len(msg) >= windowSize {
		return append(dict[:0], msg[len(msg)-windowSize:]...)
	}
	if over := len(dict) + len(msg) - windowSize; over > 0 {
		dict = dict[:copy(dict, dict[over:])]
	}
	return append(dict, msg...)
}
