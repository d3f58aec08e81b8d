//go:build linux

package httpd_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"

	"github.com/gracepoll/gracepoll/httpd"
)

// Serving an http.ServeMux: what was http.Server is httpd.Server.
func ExampleServer() {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /hello/{name}", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "Hello, %s!", r.PathValue("name"))
	})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	srv := &httpd.Server{Handler: mux}
	go srv.Serve(l)
	defer srv.Shutdown(context.Background())

	resp, err := http.Get("http://" + l.Addr().String() + "/hello/gopher")
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	fmt.Println(resp.Status, string(b))
	// Output: 200 OK Hello, gopher!
}
