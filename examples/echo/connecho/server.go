package connecho

import (
	"github.com/gracepoll/gracepoll/conn"
)

// Server is Handler on a conn.Server listening on 127.0.0.1.
type Server struct {
	*conn.Server
	h    *Handler
	addr string
}

// New starts a conn.Server with opts, serving Handler on a free port of
// 127.0.0.1.
func New(opts conn.Options) (*Server, error) {
	h := &Handler{}
	cs, err := conn.NewServer(h, opts)
	if err != nil {
		return nil, err
	}
	a, err := cs.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		cs.Close()
		return nil, err
	}
	return &Server{Server: cs, h: h, addr: a.String()}, nil
}

// Addr returns the listening address, 127.0.0.1:port.
func (s *Server) Addr() string { return s.addr }

// Open returns the connections opened and not yet closed (OnOpen without
// OnClose).
func (s *Server) Open() int64 {
	closed := s.h.Closed() // first: a connection is closed only after it opened
	return int64(s.h.Opened()) - int64(closed)
}

// Accepted returns the connections opened so far (OnOpen calls).
func (s *Server) Accepted() uint64 { return s.h.Opened() }

// Released returns the connections closed so far (OnClose calls).
func (s *Server) Released() uint64 { return s.h.Closed() }
