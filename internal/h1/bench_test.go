package h1

import "testing"

func BenchmarkParseRequest(b *testing.B) {
	for _, bb := range []struct{ name, in string }{
		{"wrk-GET", "GET /plaintext HTTP/1.1\r\nHost: localhost:8080\r\n\r\n"},
		{"POST-10-fields", "POST /api/v1/items?id=42 HTTP/1.1\r\n" +
			"Host: api.example.com\r\n" +
			"User-Agent: Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0 Safari/537.36\r\n" +
			"Accept: application/json, text/plain, */*\r\n" +
			"Accept-Language: en-US,en;q=0.9\r\n" +
			"Accept-Encoding: gzip, deflate, br\r\n" +
			"Content-Type: application/json\r\n" +
			"Content-Length: 27\r\n" +
			"Connection: keep-alive\r\n" +
			"Cookie: session=0123456789abcdef; theme=dark\r\n" +
			"Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.e30.abc\r\n" +
			"\r\n"},
	} {
		b.Run(bb.name, func(b *testing.B) {
			buf := []byte(bb.in)
			var r Request
			b.SetBytes(int64(len(buf)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := r.Parse(buf, Limits{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkChunked(b *testing.B) {
	buf := []byte("400\r\n" + string(make([]byte, 1024)) + "\r\n400;ext=1\r\n" + string(make([]byte, 1024)) + "\r\n0\r\n\r\n")
	var d ChunkedDecoder
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	for b.Loop() {
		d.Reset()
		for n := 0; ; {
			_, m, err := d.Decode(buf[n:])
			n += m
			if err != nil {
				break
			}
		}
	}
}
