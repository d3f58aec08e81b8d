package hpack

import "testing"

// benchRequest is a typical browser request's header list (Chrome, as
// h2load's defaults resemble).
var benchRequest = []Field{
	{Name: ":method", Value: "GET"},
	{Name: ":scheme", Value: "https"},
	{Name: ":authority", Value: "www.example.com"},
	{Name: ":path", Value: "/static/app.js?v=20261203"},
	{Name: "user-agent", Value: "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36"},
	{Name: "accept", Value: "text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,*/*;q=0.8"},
	{Name: "accept-encoding", Value: "gzip, deflate, br, zstd"},
}

func encodeBench(e *Encoder) []byte {
	var block []byte
	for _, f := range benchRequest {
		block = e.AppendField(block, f)
	}
	return block
}

// BenchmarkDecode decodes the request as the first on a connection
// (literals, each inserted into the table) and as a repeat (every field
// indexed from the dynamic table).
func BenchmarkDecode(b *testing.B) {
	e := NewEncoder()
	first := encodeBench(e)
	repeat := encodeBench(e)
	emit := func(Field) error { return nil }
	b.Run("first", func(b *testing.B) {
		d := NewDecoder(DefaultDynamicTableSize, 0)
		b.ReportAllocs()
		b.SetBytes(int64(len(first)))
		for b.Loop() {
			if err := d.Decode(first, emit); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("repeat", func(b *testing.B) {
		d := NewDecoder(DefaultDynamicTableSize, 0)
		if err := d.Decode(first, emit); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		b.SetBytes(int64(len(repeat)))
		for b.Loop() {
			if err := d.Decode(repeat, emit); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkEncode encodes the request as the first on a connection (a
// new Encoder each time, Huffman coding every string) and as a repeat.
func BenchmarkEncode(b *testing.B) {
	b.Run("first", func(b *testing.B) {
		b.ReportAllocs()
		buf := make([]byte, 0, 512)
		for b.Loop() {
			e := NewEncoder()
			buf = buf[:0]
			for _, f := range benchRequest {
				buf = e.AppendField(buf, f)
			}
		}
	})
	b.Run("repeat", func(b *testing.B) {
		e := NewEncoder()
		encodeBench(e)
		b.ReportAllocs()
		buf := make([]byte, 0, 512)
		for b.Loop() {
			buf = buf[:0]
			for _, f := range benchRequest {
				buf = e.AppendField(buf, f)
			}
		}
	})
}
