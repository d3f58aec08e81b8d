//go:build linux

package httpd_test

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"testing"

	"github.com/gracepoll/gracepoll/httpd"
)

// BenchmarkPipelined serves batches of 16 pipelined GET /plaintext over
// one loopback connection, client and server in this process: ns/op and
// allocs/op are per request, both sides (the client allocates nothing).
// It is for profiling the request path; docs/benchmarks.md compares
// servers in separate processes.
func BenchmarkPipelined(b *testing.B) {
	srv := &httpd.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		io.WriteString(w, "Hello, World!")
	})}
	addr := serve(b, srv)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	const batch = 16
	req := bytes.Repeat([]byte("GET /plaintext HTTP/1.1\r\nHost: localhost\r\nUser-Agent: bench\r\nAccept: */*\r\n\r\n"), batch)
	// One response's length, learnt from the first.
	c.Write(req[:len(req)/batch])
	buf := make([]byte, 64<<10)
	n, _ := c.Read(buf)
	one := bytes.Index(buf[:n], []byte("Hello, World!")) + len("Hello, World!")
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i += batch {
		if _, err := c.Write(req); err != nil {
			b.Fatal(err)
		}
		for want := one * batch; want > 0; {
			n, err := c.Read(buf[:min(len(buf), want)])
			if err != nil {
				b.Fatal(err)
			}
			want -= n
		}
	}
}
