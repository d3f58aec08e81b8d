package httpd

import (
	"crypto/tls"
	"fmt"

	"github.com/gracepoll/gracepoll/internal/h2frame"
	"github.com/gracepoll/gracepoll/internal/hpack"
)

// Defaults of HTTP/2's settings (Server.HTTP2), those of net/http.
const (
	DefaultMaxConcurrentStreams = 250
	DefaultMaxReceiveBuffer     = 1 << 20
)

// h2config is HTTP/2's part of a Server's configuration, set once by
// configure.
type h2config struct {
	tls   bool // offered by ALPN on TLS connections
	plain bool // served with prior knowledge on plain connections (h2c)

	maxStreams    uint32 // SETTINGS_MAX_CONCURRENT_STREAMS
	maxFrame      uint32 // SETTINGS_MAX_FRAME_SIZE, the largest frame read
	connWindow    uint32 // request body bytes buffered per connection
	streamWindow  uint32 // SETTINGS_INITIAL_WINDOW_SIZE
	maxHeaderList uint32 // SETTINGS_MAX_HEADER_LIST_SIZE
	decoderTable  uint32 // SETTINGS_HEADER_TABLE_SIZE
	encoderTable  uint32 // the most of the peer's table the encoder uses
	permitCiphers bool   // PermitProhibitedCipherSuites
}

// configure reads Server.Protocols, Server.HTTP2 and MaxHeaderBytes.
func (c *h2config) configure(s *Server) error {
	c.tls = s.Protocols == nil || s.Protocols.HTTP2()
	c.plain = s.Protocols != nil && s.Protocols.UnencryptedHTTP2()
	c.maxStreams = DefaultMaxConcurrentStreams
	c.maxFrame = h2frame.DefaultMaxFrameSize
	c.connWindow = DefaultMaxReceiveBuffer
	c.streamWindow = DefaultMaxReceiveBuffer
	c.decoderTable = hpack.DefaultDynamicTableSize
	c.encoderTable = hpack.DefaultDynamicTableSize
	c.maxHeaderList = uint32(cmpOr(s.MaxHeaderBytes, DefaultMaxHeaderBytes))
	cfg := s.HTTP2
	if cfg == nil {
		return nil
	}
	bad := func(what string, v any) error { return fmt.Errorf("%w: HTTP2.%s %v", ErrInvalid, what, v) }
	switch {
	case cfg.MaxConcurrentStreams < 0:
		return bad("MaxConcurrentStreams", cfg.MaxConcurrentStreams)
	case cfg.MaxReadFrameSize != 0 && (cfg.MaxReadFrameSize < h2frame.DefaultMaxFrameSize || cfg.MaxReadFrameSize > h2frame.MaxFrameSizeLimit):
		return bad("MaxReadFrameSize", cfg.MaxReadFrameSize)
	case cfg.MaxReceiveBufferPerConnection < 0 || cfg.MaxReceiveBufferPerConnection > h2frame.MaxWindowSize:
		return bad("MaxReceiveBufferPerConnection", cfg.MaxReceiveBufferPerConnection)
	case cfg.MaxReceiveBufferPerStream < 0 || cfg.MaxReceiveBufferPerStream > h2frame.MaxWindowSize:
		return bad("MaxReceiveBufferPerStream", cfg.MaxReceiveBufferPerStream)
	case cfg.MaxDecoderHeaderTableSize < 0 || cfg.MaxEncoderHeaderTableSize < 0:
		return bad("Max*HeaderTableSize", cfg.MaxDecoderHeaderTableSize)
	}
	if cfg.MaxConcurrentStreams > 0 {
		c.maxStreams = uint32(cfg.MaxConcurrentStreams)
	}
	if cfg.MaxReadFrameSize > 0 {
		c.maxFrame = uint32(cfg.MaxReadFrameSize)
	}
	// A window below the default would stall a client that sends before
	// it reads our SETTINGS; net/http keeps at least 64 KiB too.
	if n := cfg.MaxReceiveBufferPerConnection; n > 0 {
		c.connWindow = uint32(max(n, 65535))
	}
	if n := cfg.MaxReceiveBufferPerStream; n > 0 {
		c.streamWindow = uint32(max(n, 65535))
	}
	if n := cfg.MaxDecoderHeaderTableSize; n > 0 {
		c.decoderTable = uint32(min(n, 1<<20))
	}
	if n := cfg.MaxEncoderHeaderTableSize; n > 0 {
		c.encoderTable = uint32(min(n, 1<<20))
	}
	c.permitCiphers = cfg.PermitProhibitedCipherSuites
	return nil
}

// secureEnough reports whether a TLS connection meets RFC 9113 section
// 9.2: TLS 1.2 or later, and under TLS 1.2 an ephemeral key exchange with
// an AEAD cipher (section 9.2.2's deny list is every other suite).
func (c *h2config) secureEnough(cs tls.ConnectionState) bool {
	if c.permitCiphers || cs.Version >= tls.VersionTLS13 {
		return true
	}
	if cs.Version < tls.VersionTLS12 {
		return false
	}
	switch cs.CipherSuite {
	case tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
		tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384, tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
		tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256, tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256:
		return true
	}
	return false
}
