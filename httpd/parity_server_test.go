//go:build linux

package httpd_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"reflect"
	"testing"
	"time"

	"github.com/gracepoll/gracepoll/httpd"
)

// TestParityGeneralOptions: "OPTIONS *" asks about the server, not a
// resource; net/http's server answers it itself (200, Content-Length: 0)
// unless DisableGeneralOptionsHandler, and so does httpd's.
func TestParityGeneralOptions(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "root") })
	star := "OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n"
	runParity(t, []parityCase{
		{name: "ServeMux", raw: star + getReq, handler: mux.ServeHTTP},
		{name: "handler that answers", raw: star, handler: func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(500)
		}},
		{name: "with a small body", raw: "OPTIONS * HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello" + getReq, handler: mux.ServeHTTP},
		{name: "HTTP/1.0", raw: "OPTIONS * HTTP/1.0\r\n\r\n", handler: mux.ServeHTTP,
			ignoreVersion: true, ignore: []string{"Connection"}},
		{name: "OPTIONS on a path", raw: "OPTIONS /a HTTP/1.1\r\nHost: x\r\n\r\n", handler: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Allow", "GET")
		}},
	})

	t.Run("disabled", func(t *testing.T) {
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "%s %s", r.Method, r.RequestURI)
		})
		stdAddr, ours := serveBothWith(t, &httpd.Server{Handler: h, DisableGeneralOptionsHandler: true},
			func(s *http.Server) { s.DisableGeneralOptionsHandler = true })
		std, got := exchange(t, stdAddr, star), exchange(t, ours, star)
		if !reflect.DeepEqual(std, got) {
			t.Errorf("responses differ\nnet/http:\n%v\nhttpd:\n%v", std, got)
		}
		if len(got.Resps) != 1 || got.Resps[0].Body != "OPTIONS *" {
			t.Errorf("the handler did not get OPTIONS *:\n%v", got)
		}
	})
}

// TestContextKeys: a request's context answers net/http's keys as its
// server does: http.LocalAddrContextKey gives the connection's local
// address (still after the connection closed); http.ServerContextKey
// gives the *httpd.Server, as there is no *http.Server (a documented
// difference). Values of BaseContext's context come through.
func TestContextKeys(t *testing.T) {
	type key struct{}
	got := make(chan []any, 1)
	srv := &httpd.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ctx := r.Context()
			got <- []any{ctx.Value(http.LocalAddrContextKey), ctx.Value(http.ServerContextKey), ctx.Value(key{})}
		}),
		BaseContext: func(net.Listener) context.Context { return context.WithValue(context.Background(), key{}, "base") },
	}
	addr := serve(t, srv)
	c := rawConn(t, addr)
	io.WriteString(c, getReq)
	v := <-got
	local, ok := v[0].(net.Addr)
	if !ok || local.String() != c.RemoteAddr().String() {
		t.Errorf("LocalAddrContextKey = %v, want %v", v[0], c.RemoteAddr())
	}
	if s, ok := v[1].(*httpd.Server); !ok || s != srv {
		t.Errorf("ServerContextKey = %#v, want the *httpd.Server", v[1])
	}
	if v[2] != "base" {
		t.Errorf("BaseContext's value = %v, want base", v[2])
	}

	// As net/http's: the address stays the same for the request's
	// lifetime, asked before the client left and after.
	late := make(chan [2]any, 1)
	gone := make(chan struct{})
	srv2 := &httpd.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		before := r.Context().Value(http.LocalAddrContextKey)
		<-gone
		<-r.Context().Done()
		late <- [2]any{before, r.Context().Value(http.LocalAddrContextKey)}
	})}
	addr2 := serve(t, srv2)
	c2 := rawConn(t, addr2)
	io.WriteString(c2, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\nExpect: 100-continue\r\n\r\n") // served on a goroutine
	want := c2.RemoteAddr().String()
	time.Sleep(50 * time.Millisecond)
	c2.Close()
	close(gone)
	var v2 [2]any
	select {
	case v2 = <-late:
	case <-time.After(timeout):
		t.Fatal("the handler did not run, or its context was not cancelled when the client left")
	}
	for i, a := range v2 {
		if a, ok := a.(net.Addr); !ok || a.String() != want {
			t.Errorf("LocalAddrContextKey (%d) = %v, want %v", i, a, want)
		}
	}
}
