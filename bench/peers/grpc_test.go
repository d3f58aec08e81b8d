//go:build linux

package peers

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/gracepoll/gracepoll/httpd"
	"github.com/gracepoll/gracepoll/internal/testkit"
)

// The gRPC service of TestGRPCOverHTTPD, written by hand (a ServiceDesc
// over protobuf's well-known wrapper types) so that no protoc-generated
// code is needed.
const grpcService = "gracepoll.peers.Echo"

const (
	grpcEcho  = "/" + grpcService + "/Echo"  // unary: the request back, the caller's address in header "x-peer"
	grpcFail  = "/" + grpcService + "/Fail"  // unary: NotFound with details, header and trailer metadata
	grpcWait  = "/" + grpcService + "/Wait"  // unary: waits for its context to end
	grpcCount = "/" + grpcService + "/Count" // server streaming: 0..n-1
	grpcSum   = "/" + grpcService + "/Sum"   // client streaming: the sum of the numbers sent
	grpcChat  = "/" + grpcService + "/Chat"  // bidirectional: a greeting, then each message reversed
	grpcMeta  = "/" + grpcService + "/Meta"  // unary: metadata "x-big" back in header "x-big" and trailer "x-big-t"
	grpcFlood = "/" + grpcService + "/Flood" // server streaming: 64 KiB messages until the send fails
)

// The Fail method's status, metadata and detail; the message has a
// newline, non-ASCII and '%', which grpc-message must percent-encode.
const (
	grpcFailMessage = "no such key \"k/ü\": 100% gone\nsee details"
	grpcFailDetail  = "k/ü"
)

var grpcFailTrailerBin = []byte{0, 1, 2, 0xfe, 0xff, '\r', '\n'}

// grpcEchoAPI is the ServiceDesc's HandlerType: RegisterService checks
// that the implementation has it.
type grpcEchoAPI interface{ waits() *grpcWaits }

// grpcWaits is what the Wait method reports to the test: the test needs
// to know that the handler is waiting and what ended its wait.
type grpcWaits struct {
	started chan struct{} // the handler is waiting on its context
	handler chan error    // ctx.Err() as the handler saw it
	request chan error    // r.Context().Err() right after ServeHTTP returned
	flood   chan error    // Flood: r.Context().Err() right after ServeHTTP returned
	flooded atomic.Int64  // Flood: how many messages SendMsg took so far
}

func (w *grpcWaits) waits() *grpcWaits { return w }

func grpcUnary(name string, newIn func() proto.Message, f func(ctx context.Context, w *grpcWaits, in proto.Message) (proto.Message, error)) grpc.MethodDesc {
	return grpc.MethodDesc{
		MethodName: name,
		// The interceptor is nil: the test's server sets none.
		Handler: func(srv any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
			in := newIn()
			if err := dec(in); err != nil {
				return nil, err
			}
			return f(ctx, srv.(grpcEchoAPI).waits(), in)
		},
	}
}

var grpcEchoDesc = grpc.ServiceDesc{
	ServiceName: grpcService,
	HandlerType: (*grpcEchoAPI)(nil),
	Methods: []grpc.MethodDesc{
		grpcUnary("Echo", func() proto.Message { return new(wrapperspb.BytesValue) },
			func(ctx context.Context, _ *grpcWaits, in proto.Message) (proto.Message, error) {
				p, ok := peer.FromContext(ctx)
				if !ok {
					return nil, status.Error(codes.Internal, "no peer")
				}
				if err := grpc.SetHeader(ctx, metadata.Pairs("x-peer", p.Addr.String())); err != nil {
					return nil, err
				}
				return in, nil
			}),
		grpcUnary("Fail", func() proto.Message { return new(emptypb.Empty) },
			func(ctx context.Context, _ *grpcWaits, _ proto.Message) (proto.Message, error) {
				if err := grpc.SetHeader(ctx, metadata.Pairs("x-header", "h")); err != nil {
					return nil, err
				}
				if err := grpc.SetTrailer(ctx, metadata.Pairs("x-trailer", "t", "x-trailer-bin", string(grpcFailTrailerBin))); err != nil {
					return nil, err
				}
				st, err := status.New(codes.NotFound, grpcFailMessage).WithDetails(wrapperspb.String(grpcFailDetail))
				if err != nil {
					return nil, err
				}
				return nil, st.Err()
			}),
		grpcUnary("Wait", func() proto.Message { return new(emptypb.Empty) },
			func(ctx context.Context, w *grpcWaits, _ proto.Message) (proto.Message, error) {
				w.started <- struct{}{}
				select {
				case <-ctx.Done():
				case <-time.After(10 * time.Second):
				}
				w.handler <- ctx.Err()
				return nil, status.Error(codes.Unknown, "the context was not cancelled")
			}),
		grpcUnary("Meta", func() proto.Message { return new(emptypb.Empty) },
			func(ctx context.Context, _ *grpcWaits, _ proto.Message) (proto.Message, error) {
				md, _ := metadata.FromIncomingContext(ctx)
				v := md.Get("x-big")
				if len(v) != 1 {
					return nil, status.Errorf(codes.InvalidArgument, "%d x-big values", len(v))
				}
				if err := grpc.SetHeader(ctx, metadata.Pairs("x-big", v[0])); err != nil {
					return nil, err
				}
				if err := grpc.SetTrailer(ctx, metadata.Pairs("x-big-t", v[0])); err != nil {
					return nil, err
				}
				return new(emptypb.Empty), nil
			}),
	},
	Streams: []grpc.StreamDesc{
		{StreamName: "Count", ServerStreams: true, Handler: func(_ any, s grpc.ServerStream) error {
			var n wrapperspb.UInt64Value
			if err := s.RecvMsg(&n); err != nil {
				return err
			}
			for i := range n.Value {
				if err := s.SendMsg(wrapperspb.UInt64(i)); err != nil {
					return err
				}
			}
			return nil
		}},
		{StreamName: "Sum", ClientStreams: true, Handler: func(_ any, s grpc.ServerStream) error {
			var sum uint64
			for {
				var v wrapperspb.UInt64Value
				if err := s.RecvMsg(&v); err == io.EOF {
					return s.SendMsg(wrapperspb.UInt64(sum))
				} else if err != nil {
					return err
				}
				sum += v.Value
			}
		}},
		{StreamName: "Chat", ServerStreams: true, ClientStreams: true, Handler: func(_ any, s grpc.ServerStream) error {
			// The greeting goes before any request message arrives:
			// the response must be flushed while the request is open.
			if err := s.SendMsg(wrapperspb.Bytes([]byte("hello"))); err != nil {
				return err
			}
			for {
				var m wrapperspb.BytesValue
				if err := s.RecvMsg(&m); err == io.EOF {
					return nil
				} else if err != nil {
					return err
				}
				slices.Reverse(m.Value)
				if err := s.SendMsg(&m); err != nil {
					return err
				}
			}
		}},
		{StreamName: "Flood", ServerStreams: true, Handler: func(srv any, s grpc.ServerStream) error {
			if err := s.RecvMsg(new(emptypb.Empty)); err != nil {
				return err
			}
			m := wrapperspb.Bytes(make([]byte, 64<<10))
			sent := &srv.(grpcEchoAPI).waits().flooded
			sent.Store(0)
			for end := time.Now().Add(10 * time.Second); time.Now().Before(end); {
				if err := s.SendMsg(m); err != nil {
					return err
				}
				sent.Add(1)
			}
			return status.Error(codes.Unknown, "still sending after 10 s")
		}},
	},
}

// grpcMaxMsg lets the large-message subtest's 4 MiB payloads through
// (gRPC's default limit on a received message is 4 MiB, framing
// included).
const grpcMaxMsg = 16 << 20

// grpcCallTimeout bounds every call but the deadline subtest's, so that a
// stalled stream fails its subtest instead of hanging the binary.
const grpcCallTimeout = 20 * time.Second

// TestGRPCOverHTTPD makes real gRPC calls (grpc-go's client, grpc.Server
// mounted by its ServeHTTP as an http.Handler) through httpd's HTTP/2,
// over TLS (h2 by ALPN) and over h2c (prior knowledge), and through
// net/http's server the same way as the reference: a subtest failing on
// httpd alone is httpd's. Run one with e.g.
//
//	go test -race -run 'TestGRPCOverHTTPD/httpd/h2c/deadline' .
func TestGRPCOverHTTPD(t *testing.T) {
	servers := []struct {
		name  string
		serve func(t *testing.T, h http.Handler, tlsConfig *tls.Config) string
	}{
		{"net-http", serveNetHTTPForGRPC},
		{"httpd", serveHTTPDForGRPC},
	}
	for _, s := range servers {
		for _, secure := range []bool{true, false} {
			mode := "h2c"
			if secure {
				mode = "tls"
			}
			t.Run(s.name+"/"+mode, func(t *testing.T) {
				dial, w := grpcSetup(t, secure, s.serve)
				cc := dial(t)
				t.Run("unary", func(t *testing.T) { grpcTestUnary(t, cc) })
				t.Run("server-stream", func(t *testing.T) { grpcTestServerStream(t, cc) })
				t.Run("client-stream", func(t *testing.T) { grpcTestClientStream(t, cc) })
				t.Run("bidi", func(t *testing.T) { grpcTestBidi(t, cc) })
				t.Run("status", func(t *testing.T) { grpcTestStatus(t, cc) })
				t.Run("deadline", func(t *testing.T) { grpcTestDeadline(t, cc, w) })
				t.Run("large", func(t *testing.T) { grpcTestLarge(t, cc) })
				t.Run("concurrent", func(t *testing.T) { grpcTestConcurrent(t, cc) })
				t.Run("big-metadata", func(t *testing.T) { grpcTestBigMetadata(t, cc) })
				t.Run("cancel-blocked-write", func(t *testing.T) { grpcTestCancelBlockedWrite(t, dial, w) })
			})
		}
	}
}

// grpcSetup starts a grpc.Server behind serve's HTTP server, over TLS if
// secure, else h2c, and returns a client connected to it. The handler
// checks that every request came over HTTP/2, by ALPN on TLS.
func grpcSetup(t *testing.T, secure bool, serve func(*testing.T, http.Handler, *tls.Config) string) (dial func(*testing.T, ...grpc.DialOption) *grpc.ClientConn, _ *grpcWaits) {
	gs := grpc.NewServer(grpc.MaxRecvMsgSize(grpcMaxMsg), grpc.MaxSendMsgSize(grpcMaxMsg))
	w := &grpcWaits{started: make(chan struct{}, 4), handler: make(chan error, 4), request: make(chan error, 4), flood: make(chan error, 4)}
	gs.RegisterService(&grpcEchoDesc, w)
	t.Cleanup(gs.Stop)

	var bad testkit.Log
	t.Cleanup(func() {
		if bad.Count() > 0 {
			t.Errorf("%d requests not as expected:\n%s", bad.Count(), bad.String())
		}
	})
	h := http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		switch {
		case r.ProtoMajor != 2:
			bad.Add("%s %s: %s, want HTTP/2", r.Method, r.URL.Path, r.Proto)
		case secure && (r.TLS == nil || r.TLS.NegotiatedProtocol != "h2"):
			bad.Add("%s %s: not on TLS with ALPN h2 (r.TLS %v)", r.Method, r.URL.Path, r.TLS)
		case !secure && r.TLS != nil:
			bad.Add("%s %s: on TLS, want h2c", r.Method, r.URL.Path)
		}
		switch r.URL.Path {
		case grpcFlood:
			gs.ServeHTTP(rw, r)
			w.flood <- r.Context().Err()
			return
		case grpcWait:
		default:
			gs.ServeHTTP(rw, r)
			return
		}
		// Without grpc-timeout the server sets no deadline of its own:
		// only the client's RST_STREAM, cancelling r.Context(), can end
		// the handler's wait.
		r.Header.Del("Grpc-Timeout")
		gs.ServeHTTP(rw, r)
		w.request <- r.Context().Err()
	})

	var serverConfig *tls.Config
	creds := insecure.NewCredentials()
	if secure {
		var clientConfig *tls.Config
		serverConfig, clientConfig = testkit.TLSConfigs(t)
		creds = credentials.NewTLS(clientConfig) // offers h2 by ALPN, and insists on it
	}
	addr := serve(t, h, serverConfig)
	return func(t *testing.T, opts ...grpc.DialOption) *grpc.ClientConn {
		opts = append([]grpc.DialOption{
			grpc.WithTransportCredentials(creds),
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(grpcMaxMsg), grpc.MaxCallSendMsgSize(grpcMaxMsg)),
		}, opts...)
		cc, err := grpc.NewClient(addr, opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cc.Close() })
		// One call first, so that a server that does not speak gRPC
		// fails once here rather than in every subtest.
		if err := cc.Invoke(grpcContext(t), grpcEcho, wrapperspb.Bytes([]byte("first")), new(wrapperspb.BytesValue)); err != nil {
			t.Fatalf("first call: %v", err)
		}
		return cc
	}, w
}

// serveNetHTTPForGRPC serves h with net/http's server: by ALPN over TLS
// (ServeTLS offers h2), with prior knowledge without.
func serveNetHTTPForGRPC(t *testing.T, h http.Handler, tlsConfig *tls.Config) string {
	ln, err := listenLoopback()
	if err != nil {
		t.Fatal(err)
	}
	var errLog testkit.SyncBuffer
	srv := &http.Server{Handler: h, TLSConfig: tlsConfig, ErrorLog: log.New(&errLog, "", 0)}
	served := make(chan error, 1)
	if tlsConfig != nil {
		go func() { served <- srv.ServeTLS(ln, "", "") }()
	} else {
		srv.Protocols = grpcH2CProtocols()
		go func() { served <- srv.Serve(ln) }()
	}
	t.Cleanup(func() { grpcStopServer(t, srv.Close, served, &errLog) })
	return ln.Addr().String()
}

// serveHTTPDForGRPC serves h with httpd: TLS by its TLSConfig (ALPN
// offers h2 by default), h2c by Protocols.
func serveHTTPDForGRPC(t *testing.T, h http.Handler, tlsConfig *tls.Config) string {
	ln, err := listenLoopback()
	if err != nil {
		t.Fatal(err)
	}
	var errLog testkit.SyncBuffer
	srv := &httpd.Server{Handler: h, TLSConfig: tlsConfig, ErrorLog: log.New(&errLog, "", 0)}
	if tlsConfig == nil {
		srv.Protocols = grpcH2CProtocols()
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	t.Cleanup(func() { grpcStopServer(t, srv.Close, served, &errLog) })
	return ln.Addr().String()
}

func grpcH2CProtocols() *http.Protocols {
	p := new(http.Protocols)
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	return p
}

// grpcStopServer closes a server, checks that its Serve returned
// http.ErrServerClosed, and shows what it logged (not an error: net/http
// logs, for one, connections the client reset).
func grpcStopServer(t *testing.T, closeServer func() error, served <-chan error, errLog *testkit.SyncBuffer) {
	if err := closeServer(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if err := testkit.Wait(t, served, 10*time.Second, "Serve after Close"); !errors.Is(err, http.ErrServerClosed) {
		t.Errorf("Serve returned %v, want http.ErrServerClosed", err)
	}
	if s := errLog.String(); s != "" {
		t.Logf("the server logged:\n%s", s)
	}
}

func grpcContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), grpcCallTimeout)
	t.Cleanup(cancel)
	return ctx
}

func grpcTestUnary(t *testing.T, cc *grpc.ClientConn) {
	ctx := grpcContext(t)
	for _, msg := range []string{"", "ping", "a longer message with\x00binary\xffbytes"} {
		var out wrapperspb.BytesValue
		if err := cc.Invoke(ctx, grpcEcho, wrapperspb.Bytes([]byte(msg)), &out); err != nil {
			t.Fatalf("Echo(%q): %v", msg, err)
		}
		if string(out.Value) != msg {
			t.Fatalf("Echo(%q) = %q", msg, out.Value)
		}
	}
}

func grpcTestServerStream(t *testing.T, cc *grpc.ClientConn) {
	const n = 1000
	s, err := cc.NewStream(grpcContext(t), &grpcEchoDesc.Streams[0], grpcCount)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SendMsg(wrapperspb.UInt64(n)); err != nil {
		t.Fatal(err)
	}
	if err := s.CloseSend(); err != nil {
		t.Fatal(err)
	}
	for i := range uint64(n) {
		var v wrapperspb.UInt64Value
		if err := s.RecvMsg(&v); err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		if v.Value != i {
			t.Fatalf("message %d is %d", i, v.Value)
		}
	}
	if err := s.RecvMsg(new(wrapperspb.UInt64Value)); err != io.EOF {
		t.Fatalf("after %d messages: %v, want io.EOF (status OK)", n, err)
	}
}

func grpcTestClientStream(t *testing.T, cc *grpc.ClientConn) {
	const n = 1000
	s, err := cc.NewStream(grpcContext(t), &grpcEchoDesc.Streams[1], grpcSum)
	if err != nil {
		t.Fatal(err)
	}
	for i := range uint64(n) {
		if err := s.SendMsg(wrapperspb.UInt64(i + 1)); err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	if err := s.CloseSend(); err != nil {
		t.Fatal(err)
	}
	var sum wrapperspb.UInt64Value
	if err := s.RecvMsg(&sum); err != nil {
		t.Fatal(err)
	}
	if want := uint64(n * (n + 1) / 2); sum.Value != want {
		t.Fatalf("sum %d, want %d", sum.Value, want)
	}
	if err := s.RecvMsg(new(wrapperspb.UInt64Value)); err != io.EOF {
		t.Fatalf("after the sum: %v, want io.EOF (status OK)", err)
	}
}

// grpcTestBidi sends each message only after the answer to the previous
// one came: both directions of the stream are open and interleaved.
func grpcTestBidi(t *testing.T, cc *grpc.ClientConn) {
	s, err := cc.NewStream(grpcContext(t), &grpcEchoDesc.Streams[2], grpcChat)
	if err != nil {
		t.Fatal(err)
	}
	var m wrapperspb.BytesValue
	if err := s.RecvMsg(&m); err != nil || string(m.Value) != "hello" {
		t.Fatalf("greeting %q, %v", m.Value, err)
	}
	for i := range 200 {
		msg := fmt.Sprintf("message %d", i)
		if err := s.SendMsg(wrapperspb.Bytes([]byte(msg))); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
		if err := s.RecvMsg(&m); err != nil {
			t.Fatalf("receive %d: %v", i, err)
		}
		slices.Reverse(m.Value)
		if string(m.Value) != msg {
			t.Fatalf("answer %d reversed is %q, want %q", i, m.Value, msg)
		}
	}
	if err := s.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if err := s.RecvMsg(&m); err != io.EOF {
		t.Fatalf("after CloseSend: %v, want io.EOF (status OK)", err)
	}
}

// grpcTestStatus checks an error status and the metadata around it; the
// status, its details and the trailer metadata travel in HTTP/2
// trailers.
func grpcTestStatus(t *testing.T, cc *grpc.ClientConn) {
	var header, trailer metadata.MD
	err := cc.Invoke(grpcContext(t), grpcFail, new(emptypb.Empty), new(emptypb.Empty), grpc.Header(&header), grpc.Trailer(&trailer))
	st, ok := status.FromError(err)
	if !ok {
		t.Fatalf("error %v is not a gRPC status", err)
	}
	if st.Code() != codes.NotFound || st.Message() != grpcFailMessage {
		t.Errorf("status %v %q, want NotFound %q", st.Code(), st.Message(), grpcFailMessage)
	}
	if d := st.Details(); len(d) != 1 {
		t.Errorf("details %v, want one", d)
	} else if v, ok := d[0].(*wrapperspb.StringValue); !ok || v.Value != grpcFailDetail {
		t.Errorf("detail %v, want StringValue %q", d[0], grpcFailDetail)
	}
	if got := header.Get("x-header"); !slices.Equal(got, []string{"h"}) {
		t.Errorf("header x-header %q, want [h]", got)
	}
	if got := trailer.Get("x-trailer"); !slices.Equal(got, []string{"t"}) {
		t.Errorf("trailer x-trailer %q, want [t]", got)
	}
	if got := trailer.Get("x-trailer-bin"); len(got) != 1 || got[0] != string(grpcFailTrailerBin) {
		t.Errorf("trailer x-trailer-bin %q, want [%q]", got, grpcFailTrailerBin)
	}
}

// grpcTestDeadline lets a call's deadline pass while its handler waits on
// its context: the client must report DeadlineExceeded, and the server's
// request context must be cancelled, which only the client's RST_STREAM
// can do (the handler's wrapper removed grpc-timeout).
func grpcTestDeadline(t *testing.T, cc *grpc.ClientConn, w *grpcWaits) {
	// Long enough for the request to reach the handler on a connected,
	// loaded machine; the wait is the subtest's main cost.
	const deadline = 500 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	err := cc.Invoke(ctx, grpcWait, new(emptypb.Empty), new(emptypb.Empty))
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("error %v, want DeadlineExceeded", err)
	}
	select {
	case <-w.started:
	default:
		t.Fatalf("the handler did not start within the %v deadline", deadline)
	}
	select {
	case err := <-w.handler:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("the handler's wait ended with %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("the handler's context not cancelled 5 s after the deadline: the client's RST_STREAM did not cancel r.Context()")
	}
	if err := testkit.Wait(t, w.request, 5*time.Second, "ServeHTTP returning"); !errors.Is(err, context.Canceled) {
		t.Errorf("r.Context().Err() after ServeHTTP: %v, want context.Canceled", err)
	}
	// The connection outlives the reset stream.
	if err := cc.Invoke(grpcContext(t), grpcEcho, wrapperspb.Bytes([]byte("after")), new(wrapperspb.BytesValue)); err != nil {
		t.Fatalf("a call after the deadline: %v", err)
	}
}

// grpcTestLarge echoes 4 MiB messages, several at once: far past every
// initial flow-control window (64 KiB by default, 1 MiB on the servers),
// so both directions depend on WINDOW_UPDATE, per stream and for the
// connection shared by the calls.
func grpcTestLarge(t *testing.T, cc *grpc.ClientConn) {
	const size, calls = 4 << 20, 3
	ctx := grpcContext(t)
	var wg sync.WaitGroup
	for i := range calls {
		wg.Go(func() {
			in := make([]byte, size)
			rand.Read(in)
			var out wrapperspb.BytesValue
			if err := cc.Invoke(ctx, grpcEcho, wrapperspb.Bytes(in), &out); err != nil {
				t.Errorf("call %d: %v", i, err)
			} else if !bytes.Equal(out.Value, in) {
				t.Errorf("call %d: %d bytes back, not the %d sent", i, len(out.Value), len(in))
			}
		})
	}
	wg.Wait()
}

// grpcTestConcurrent makes 100 unary calls at once; the "x-peer" header
// shows they shared one connection.
func grpcTestConcurrent(t *testing.T, cc *grpc.ClientConn) {
	const calls = 100
	ctx := grpcContext(t)
	peers := make([]string, calls)
	var errs testkit.Log
	var wg sync.WaitGroup
	for i := range calls {
		wg.Go(func() {
			msg := fmt.Sprintf("call %d", i)
			var out wrapperspb.BytesValue
			var header metadata.MD
			if err := cc.Invoke(ctx, grpcEcho, wrapperspb.Bytes([]byte(msg)), &out, grpc.Header(&header)); err != nil {
				errs.Add("call %d: %v", i, err)
				return
			}
			if string(out.Value) != msg {
				errs.Add("call %d: %q back", i, out.Value)
			}
			if p := header.Get("x-peer"); len(p) == 1 {
				peers[i] = p[0]
			}
		})
	}
	wg.Wait()
	if errs.Count() > 0 {
		t.Fatalf("%d of %d calls failed:\n%s", errs.Count(), calls, errs.String())
	}
	slices.Sort(peers)
	if peers = slices.Compact(peers); len(peers) != 1 || peers[0] == "" {
		t.Errorf("the calls came from %q, want one connection", peers)
	}
}

// grpcTestBigMetadata sends and gets back header blocks larger than a
// frame (16 KiB by default): the request's headers, the response's
// headers and its trailers each take CONTINUATION frames.
func grpcTestBigMetadata(t *testing.T, cc *grpc.ClientConn) {
	// Random letters: HPACK's Huffman code shrinks them by a quarter at
	// most, so 40 KiB stay well over two frames, and under httpd's
	// default header list limit (MaxHeaderBytes, 64 KiB).
	const letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	b := make([]byte, 40<<10)
	rand.Read(b)
	for i := range b {
		b[i] = letters[int(b[i])%len(letters)]
	}
	big := string(b)
	ctx := metadata.AppendToOutgoingContext(grpcContext(t), "x-big", big)
	var header, trailer metadata.MD
	if err := cc.Invoke(ctx, grpcMeta, new(emptypb.Empty), new(emptypb.Empty), grpc.Header(&header), grpc.Trailer(&trailer)); err != nil {
		t.Fatal(err)
	}
	if v := header.Get("x-big"); len(v) != 1 || v[0] != big {
		t.Errorf("header x-big: %d values, want the %d bytes sent", len(v), len(big))
	}
	if v := trailer.Get("x-big-t"); len(v) != 1 || v[0] != big {
		t.Errorf("trailer x-big-t: %d values, want the %d bytes sent", len(v), len(big))
	}
}

// grpcTestCancelBlockedWrite cancels a call whose handler sends faster
// than the client reads: once the client stops reading, the handler's
// Write waits for flow-control window that will not come, and the
// client's RST_STREAM must end that wait, so that ServeHTTP returns.
// The client has windows of 64 KiB, fixed (no BDP estimation growing
// them), so that the server runs out of window at once.
func grpcTestCancelBlockedWrite(t *testing.T, dial func(*testing.T, ...grpc.DialOption) *grpc.ClientConn, w *grpcWaits) {
	cc := dial(t, grpc.WithInitialWindowSize(1<<16), grpc.WithInitialConnWindowSize(1<<16))
	ctx, cancel := context.WithCancel(grpcContext(t))
	defer cancel()
	s, err := cc.NewStream(ctx, &grpcEchoDesc.Streams[3], grpcFlood)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SendMsg(new(emptypb.Empty)); err != nil {
		t.Fatal(err)
	}
	if err := s.CloseSend(); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if err := s.RecvMsg(new(wrapperspb.BytesValue)); err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	// Long enough for the server to fill every window and block.
	time.Sleep(200 * time.Millisecond)
	// With 64 KiB windows a server that blocks its writer has taken a
	// few messages: what the client read, what is in flight, and the
	// server's own buffers. Hundreds would mean the handler's output
	// piles up in memory while the client does not read. (Counted
	// before the cancel: after it, grpc's ServeHTTP ignores failing
	// Writes until it sees the context end, and SendMsg spins.)
	if n := w.flooded.Load(); n > 64 {
		t.Errorf("the handler sent %d messages of 64 KiB to a client that read 2: its writes did not wait for flow control", n)
	} else {
		t.Logf("the handler sent %d messages of 64 KiB; the client read 2", n)
	}
	cancel()
	select {
	case err := <-w.flood:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("r.Context().Err() after ServeHTTP: %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("ServeHTTP still running 5 s after the client cancelled: a Write blocked on flow control did not end with the stream")
	}

	if err := cc.Invoke(grpcContext(t), grpcEcho, wrapperspb.Bytes([]byte("after")), new(wrapperspb.BytesValue)); err != nil {
		t.Fatalf("a call after the cancel: %v", err)
	}
}
