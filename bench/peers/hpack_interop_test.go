// HPACK interop: internal/hpack against golang.org/x/net/http2/hpack, the
// implementation net/http vendors, each way round (our Encoder to its
// Decoder, its Encoder to our Decoder). Every decoded field is compared
// with the one encoded, over long sequences that only decode right if
// both dynamic tables stay in step. It lives here, not in package hpack,
// so that gracepoll's go.mod does not depend on x/net.

package peers

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/gracepoll/gracepoll/internal/hpack"
	xhpack "golang.org/x/net/http2/hpack"
)

// hpackLink is one direction of a connection: an encoder on one side and
// the peer's decoder on the other.
type hpackLink interface {
	// setTableSize applies an acknowledged SETTINGS_HEADER_TABLE_SIZE
	// of n: the decoder allows n and the encoder switches to it.
	setTableSize(n uint32)
	// roundTrip encodes fs as one header block and decodes it.
	roundTrip(fs []hpack.Field) (got []hpack.Field, blockLen int, err error)
}

// oursToX sends with our Encoder to x/net's Decoder.
type oursToX struct {
	enc *hpack.Encoder
	dec *xhpack.Decoder
	buf []byte
}

func newOursToX() *oursToX {
	return &oursToX{
		enc: hpack.NewEncoder(),
		dec: xhpack.NewDecoder(hpack.DefaultDynamicTableSize, nil),
	}
}

func (l *oursToX) setTableSize(n uint32) {
	// x/net's SetMaxDynamicTableSize would resize its table directly;
	// the allowed maximum is what the size update is checked against.
	l.dec.SetAllowedMaxDynamicTableSize(n)
	l.enc.SetMaxDynamicTableSize(n)
}

func (l *oursToX) roundTrip(fs []hpack.Field) ([]hpack.Field, int, error) {
	l.buf = l.buf[:0]
	for _, f := range fs {
		l.buf = l.enc.AppendField(l.buf, f)
	}
	hfs, err := l.dec.DecodeFull(l.buf)
	got := make([]hpack.Field, len(hfs))
	for i, hf := range hfs {
		got[i] = hpack.Field{Name: hf.Name, Value: hf.Value, Sensitive: hf.Sensitive}
	}
	return got, len(l.buf), err
}

// xToOurs sends with x/net's Encoder to our Decoder.
type xToOurs struct {
	w   bytes.Buffer
	enc *xhpack.Encoder
	dec *hpack.Decoder
}

func newXToOurs() *xToOurs {
	l := &xToOurs{dec: hpack.NewDecoder(hpack.DefaultDynamicTableSize, 0)}
	l.enc = xhpack.NewEncoder(&l.w)
	return l
}

func (l *xToOurs) setTableSize(n uint32) {
	l.dec.SetMaxDynamicTableSize(n)
	// x/net clamps the size to its limit, 4096 by default.
	l.enc.SetMaxDynamicTableSizeLimit(n)
	l.enc.SetMaxDynamicTableSize(n)
}

func (l *xToOurs) roundTrip(fs []hpack.Field) ([]hpack.Field, int, error) {
	l.w.Reset()
	for _, f := range fs {
		if err := l.enc.WriteField(xhpack.HeaderField{Name: f.Name, Value: f.Value, Sensitive: f.Sensitive}); err != nil {
			return nil, 0, err
		}
	}
	var got []hpack.Field
	err := l.dec.Decode(l.w.Bytes(), func(f hpack.Field) error {
		got = append(got, f)
		return nil
	})
	return got, l.w.Len(), err
}

// hpackBlock is one header block of a sequence, preceded by a table
// size change when tableSize is not zero.
type hpackBlock struct {
	tableSize uint32
	fields    []hpack.Field
}

func browserRequest(path, cookie string) []hpack.Field {
	return []hpack.Field{
		{Name: ":method", Value: "GET"},
		{Name: ":scheme", Value: "https"},
		{Name: ":authority", Value: "www.example.com"},
		{Name: ":path", Value: path},
		{Name: "user-agent", Value: "Mozilla/5.0 (X11; Linux x86_64; rv:133.0) Gecko/20100101 Firefox/133.0"},
		{Name: "accept", Value: "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"},
		{Name: "accept-language", Value: "en-US,en;q=0.5"},
		{Name: "accept-encoding", Value: "gzip, deflate, br, zstd"},
		{Name: "sec-fetch-dest", Value: "document"},
		{Name: "sec-fetch-mode", Value: "navigate"},
		{Name: "sec-fetch-site", Value: "same-origin"},
		{Name: "upgrade-insecure-requests", Value: "1"},
		{Name: "cookie", Value: cookie, Sensitive: true},
	}
}

// hpackSequence returns the blocks of one connection: browser requests,
// responses with changing values, sensitive fields, values large enough
// to evict or to bypass the table, and table size changes down to zero
// and up past the default.
func hpackSequence(rng *rand.Rand) []hpackBlock {
	var seq []hpackBlock
	sizes := []uint32{4096, 256, 0, 8192, 100, 4096, 16384, 64, 4096}
	for i := range 240 {
		var b hpackBlock
		if i%30 == 29 {
			b.tableSize = sizes[(i/30)%len(sizes)]
			if b.tableSize == 0 {
				// Zero is a real size; mark it distinctly.
				b.tableSize = ^uint32(0)
			}
		}
		switch i % 6 {
		case 0, 3:
			b.fields = browserRequest(fmt.Sprintf("/static/app.%d.js?v=%d", i%7, rng.IntN(3)),
				fmt.Sprintf("session=%016x", rng.Uint64()%4))
		case 1, 4:
			b.fields = []hpack.Field{
				{Name: ":status", Value: []string{"200", "304", "404", "206"}[rng.IntN(4)]},
				{Name: "date", Value: fmt.Sprintf("Thu, 03 Dec 2026 12:%02d:%02d GMT", i/60, i%60)},
				{Name: "content-type", Value: "application/javascript; charset=utf-8"},
				{Name: "content-length", Value: fmt.Sprint(rng.IntN(100000))},
				{Name: "etag", Value: fmt.Sprintf(`"%x"`, rng.Uint32()%8)},
				{Name: "cache-control", Value: "public, max-age=31536000, immutable"},
				{Name: "x-request-id", Value: fmt.Sprintf("%032x", rng.Uint64())},
				{Name: "set-cookie", Value: fmt.Sprintf("id=%d; Path=/; HttpOnly", rng.IntN(5)), Sensitive: rng.IntN(2) == 0},
				{Name: "authorization", Value: "Bearer abc", Sensitive: true},
			}
		case 2:
			// Large values: some fit the table only by evicting most of
			// it, others exceed it and must bypass it.
			b.fields = []hpack.Field{
				{Name: ":status", Value: "200"},
				{Name: "x-large", Value: strings.Repeat(string(rune('a'+i%26)), 1000+rng.IntN(4000))},
				{Name: "x-huge", Value: strings.Repeat("\x00\xff~", 2000)},
				{Name: "content-type", Value: "text/plain"},
			}
		case 5:
			// Arbitrary bytes in names and values, repeated fields.
			v := make([]byte, rng.IntN(40))
			for j := range v {
				v[j] = byte(rng.Uint32())
			}
			b.fields = []hpack.Field{
				{Name: "x-bin", Value: string(v)},
				{Name: "x-bin", Value: string(v)},
				{Name: "", Value: ""},
				{Name: "x-Mixed\tCase", Value: " spaced "},
				{Name: "x-bin", Value: string(v), Sensitive: true},
			}
		}
		seq = append(seq, b)
	}
	return seq
}

// runHPACKSequence round-trips the blocks of seq over l, failing on the
// first mismatch. Sending each block twice proves the tables in step:
// the repeat is mostly table references, which decode to the right
// fields only if the decoder's table matches the encoder's.
func runHPACKSequence(t testing.TB, l hpackLink, seq []hpackBlock) {
	t.Helper()
	for i, b := range seq {
		switch b.tableSize {
		case 0:
		case ^uint32(0):
			l.setTableSize(0)
		default:
			l.setTableSize(b.tableSize)
		}
		for rep := range 2 {
			got, n, err := l.roundTrip(b.fields)
			if err != nil {
				t.Fatalf("block %d (repeat %d, %d bytes): %v", i, rep, n, err)
			}
			if !slices.Equal(got, b.fields) {
				t.Fatalf("block %d (repeat %d): fields differ\n got %s\nwant %s", i, rep, quoteFields(got), quoteFields(b.fields))
			}
		}
	}
}

// quoteFields formats fs for a failure message, bytes escaped.
func quoteFields(fs []hpack.Field) string {
	var sb strings.Builder
	for _, f := range fs {
		fmt.Fprintf(&sb, "{%q %q %v} ", f.Name, f.Value, f.Sensitive)
	}
	return sb.String()
}

func TestHPACKInterop(t *testing.T) {
	seq := hpackSequence(rand.New(rand.NewPCG(1, 2)))
	t.Run("ours-to-xnet", func(t *testing.T) { runHPACKSequence(t, newOursToX(), seq) })
	t.Run("xnet-to-ours", func(t *testing.T) { runHPACKSequence(t, newXToOurs(), seq) })

	// Compression proves indexing, not just literals: a repeated
	// browser request must shrink to about one byte a field.
	req := browserRequest("/", "session=1")
	for _, l := range []hpackLink{newOursToX(), newXToOurs()} {
		_, first, _ := l.roundTrip(req)
		_, again, err := l.roundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		// The sensitive cookie stays a literal.
		if again > len(req)+len("session=1")+4 {
			t.Errorf("%T: repeated request %d bytes (first %d); not indexed", l, again, first)
		}
	}
}

// fieldsFromBytes turns fuzz input into a sequence of blocks: each
// field's name is one of a few (so the table's name matching is used)
// or taken from the input, its value from the input.
func fieldsFromBytes(data []byte) []hpackBlock {
	names := []string{":path", "cookie", "x-a", "x-b", "content-type", ""}
	var seq []hpackBlock
	var cur hpackBlock
	for len(data) >= 2 {
		op, n := data[0], int(data[1])
		data = data[2:]
		n = min(n, len(data))
		s := string(data[:n])
		data = data[n:]
		switch {
		case op == 0xff:
			// An empty block cannot carry a pending size update (both
			// encoders emit it with the first field), and a decoder
			// whose limit was lowered rightly rejects it (RFC 7541
			// 4.2). Keep the size change for the next block instead.
			if len(cur.fields) > 0 {
				seq = append(seq, cur)
				cur = hpackBlock{}
			}
		case op == 0xfe:
			// Table size from the length byte, scaled; zero is marked.
			cur.tableSize = uint32(n) * 32
			if cur.tableSize == 0 {
				cur.tableSize = ^uint32(0)
			}
		case op&0x80 != 0:
			cur.fields = append(cur.fields, hpack.Field{Name: s, Value: names[int(op)%len(names)], Sensitive: op&0x40 != 0})
		default:
			cur.fields = append(cur.fields, hpack.Field{Name: names[int(op)%len(names)], Value: s, Sensitive: op&0x40 != 0})
		}
	}
	if len(cur.fields) > 0 {
		seq = append(seq, cur)
	}
	return seq
}

func FuzzHPACKInterop(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte("\xfe0")) // a size change and no field
	f.Add([]byte{0, 1, '/', 1, 5, 'a', '=', 'b', ';', 'c', 0xff, 0, 0, 1, '/'})
	f.Add([]byte{0xfe, 0, 2, 3, 'x', 'y', 'z', 0xff, 0, 0xfe, 200, 0xc0, 4, 'n', 'a', 'm', 'e', 0xff, 0, 3, 0})
	f.Add([]byte{0xfe, 2, 3, 60, 'a', 'a', 'a', 'a', 'a', 'a', 'a', 'a', 'a', 'a', 0xff, 0, 3, 1, 'b', 0xfe, 255, 0x43, 2, 0, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		seq := fieldsFromBytes(data)
		runHPACKSequence(t, newOursToX(), seq)
		runHPACKSequence(t, newXToOurs(), seq)
	})
}

// The benchmarks run ours and x/net's on the same browser request, so one
// run compares them. "cold" is a connection's first request (literals,
// filling a fresh table); "warm" a repeat (mostly table references).

func BenchmarkHPACKDecode(b *testing.B) {
	req := browserRequest("/index.html", "session=0123456789abcdef")
	// One pair of blocks, x/net-encoded, decoded by both.
	var w bytes.Buffer
	xe := xhpack.NewEncoder(&w)
	encode := func() []byte {
		w.Reset()
		for _, f := range req {
			_ = xe.WriteField(xhpack.HeaderField{Name: f.Name, Value: f.Value, Sensitive: f.Sensitive})
		}
		return bytes.Clone(w.Bytes())
	}
	cold, warm := encode(), encode()

	var n int
	ours := func(b *testing.B, d *hpack.Decoder, block []byte) {
		if err := d.Decode(block, func(hpack.Field) error { n++; return nil }); err != nil {
			b.Fatal(err)
		}
	}
	xnet := func(b *testing.B, d *xhpack.Decoder, block []byte) {
		if _, err := d.Write(block); err != nil {
			b.Fatal(err)
		}
		if err := d.Close(); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("cold/ours", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			ours(b, hpack.NewDecoder(hpack.DefaultDynamicTableSize, 0), cold)
		}
	})
	b.Run("cold/xnet", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			xnet(b, xhpack.NewDecoder(hpack.DefaultDynamicTableSize, func(xhpack.HeaderField) { n++ }), cold)
		}
	})
	b.Run("warm/ours", func(b *testing.B) {
		d := hpack.NewDecoder(hpack.DefaultDynamicTableSize, 0)
		ours(b, d, cold)
		b.ReportAllocs()
		for b.Loop() {
			ours(b, d, warm)
		}
	})
	b.Run("warm/xnet", func(b *testing.B) {
		d := xhpack.NewDecoder(hpack.DefaultDynamicTableSize, func(xhpack.HeaderField) { n++ })
		xnet(b, d, cold)
		b.ReportAllocs()
		for b.Loop() {
			xnet(b, d, warm)
		}
	})
}

func BenchmarkHPACKEncode(b *testing.B) {
	req := browserRequest("/index.html", "session=0123456789abcdef")
	xreq := make([]xhpack.HeaderField, len(req))
	for i, f := range req {
		xreq[i] = xhpack.HeaderField{Name: f.Name, Value: f.Value, Sensitive: f.Sensitive}
	}
	buf := make([]byte, 0, 1024)
	ours := func(e *hpack.Encoder) {
		buf = buf[:0]
		for _, f := range req {
			buf = e.AppendField(buf, f)
		}
	}
	var w bytes.Buffer
	w.Grow(1024)
	xnet := func(e *xhpack.Encoder) {
		w.Reset()
		for _, f := range xreq {
			_ = e.WriteField(f)
		}
	}
	b.Run("cold/ours", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			ours(hpack.NewEncoder())
		}
	})
	b.Run("cold/xnet", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			xnet(xhpack.NewEncoder(&w))
		}
	})
	b.Run("warm/ours", func(b *testing.B) {
		e := hpack.NewEncoder()
		ours(e)
		b.ReportAllocs()
		for b.Loop() {
			ours(e)
		}
	})
	b.Run("warm/xnet", func(b *testing.B) {
		e := xhpack.NewEncoder(&w)
		xnet(e)
		b.ReportAllocs()
		for b.Loop() {
			xnet(e)
		}
	})
}
