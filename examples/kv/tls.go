package main

import (
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/gracepoll/gracepoll/conn"
	"github.com/gracepoll/gracepoll/internal/selfsigned"
)

// tlsFlags are the command line's TLS settings.
type tlsFlags struct {
	cert, key        string
	selfSigned       bool
	caOut            string
	clientCA         string
	alpn             string
	handshakeTimeout time.Duration
	maxHandshakes    int
}

// register defines the TLS flags on fs.
func (f *tlsFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.cert, "tls-cert", "", "serve TLS with this certificate (PEM file, the chain after the leaf); needs -tls-key")
	fs.StringVar(&f.key, "tls-key", "", "the private key of -tls-cert (PEM file)")
	fs.BoolVar(&f.selfSigned, "tls-self-signed", false, "serve TLS with a self-signed ECDSA P-256 certificate for localhost, 127.0.0.1 and ::1, made at startup and kept in memory")
	fs.StringVar(&f.caOut, "tls-cacert-out", "", "with -tls-self-signed, write its certificate (PEM) to this file for clients to trust (redis-cli --tls --cacert FILE); without it a temporary file is written, printed, and removed at exit")
	fs.StringVar(&f.clientCA, "tls-client-ca", "", "require every client to present a certificate that verifies against these PEM certificates (mutual TLS)")
	fs.StringVar(&f.alpn, "tls-alpn", "", "ALPN protocols to offer, comma-separated in order of preference; a client that offers none of them is refused")
	fs.DurationVar(&f.handshakeTimeout, "tls-handshake-timeout", 0, fmt.Sprintf("how long a client may take to complete its TLS handshake (0: %v)", conn.DefaultHandshakeTimeout))
	fs.IntVar(&f.maxHandshakes, "tls-max-handshakes", 0, fmt.Sprintf("most TLS handshakes in progress at once (begun by a client's first bytes); a connection beyond it is reset (0: %d)", conn.DefaultMaxHandshakes))
}

// on reports whether TLS is asked for.
func (f *tlsFlags) on() bool { return f.cert != "" || f.key != "" || f.selfSigned }

// check reports flags that contradict each other or need TLS.
func (f *tlsFlags) check() error {
	switch {
	case f.selfSigned && (f.cert != "" || f.key != ""):
		return errors.New("-tls-self-signed and -tls-cert/-tls-key exclude each other")
	case (f.cert == "") != (f.key == ""):
		return errors.New("-tls-cert and -tls-key go together")
	case f.caOut != "" && !f.selfSigned:
		return errors.New("-tls-cacert-out needs -tls-self-signed")
	case !f.on() && (f.clientCA != "" || f.alpn != "" || f.handshakeTimeout != 0 || f.maxHandshakes != 0):
		return errors.New("-tls-client-ca, -tls-alpn, -tls-handshake-timeout and -tls-max-handshakes need -tls-cert and -tls-key, or -tls-self-signed")
	case f.handshakeTimeout < 0 || f.maxHandshakes < 0:
		return errors.New("-tls-handshake-timeout and -tls-max-handshakes must not be negative")
	}
	return nil
}

// tlsSetup is the server's TLS configuration and what the operator needs
// to hear about it once the server listens.
type tlsSetup struct {
	config *tls.Config
	// caFile is where the self-signed certificate was written, if it was;
	// temp says it was a file of our own, removed at exit.
	caFile string
	temp   bool
	hosts  []string
}

// config builds the server's tls.Config from the flags (nil without TLS).
func (f *tlsFlags) config() (*tlsSetup, error) {
	if !f.on() {
		return nil, nil
	}
	cfg := &tls.Config{}
	setup := &tlsSetup{config: cfg}
	if f.selfSigned {
		c, err := selfsigned.New()
		if err != nil {
			return nil, err
		}
		cfg.Certificates = []tls.Certificate{c.TLS}
		setup.hosts = c.Hosts
		if err := setup.writeCA(f.caOut, c.CertPEM); err != nil {
			return nil, err
		}
	} else {
		pair, err := tls.LoadX509KeyPair(f.cert, f.key)
		if err != nil {
			return nil, fmt.Errorf("-tls-cert %s -tls-key %s: %w", f.cert, f.key, err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	if f.clientCA != "" {
		pool, err := selfsigned.LoadPool(f.clientCA)
		if err != nil {
			setup.close()
			return nil, fmt.Errorf("-tls-client-ca: %w", err)
		}
		cfg.ClientAuth, cfg.ClientCAs = tls.RequireAndVerifyClientCert, pool
	}
	for p := range strings.SplitSeq(f.alpn, ",") {
		if p = strings.TrimSpace(p); p != "" {
			cfg.NextProtos = append(cfg.NextProtos, p)
		}
	}
	return setup, nil
}

// writeCA writes the self-signed certificate to path, or to a new
// temporary file if path is empty.
func (s *tlsSetup) writeCA(path string, pem []byte) error {
	if path != "" {
		s.caFile = path
		return os.WriteFile(path, pem, 0o644)
	}
	f, err := os.CreateTemp("", "kv-cacert-*.pem")
	if err != nil {
		return err
	}
	s.caFile, s.temp = f.Name(), true
	_, err = f.Write(pem)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(f.Name())
	}
	return err
}

// announce tells how to reach the server over TLS.
func (s *tlsSetup) announce(w io.Writer, port string) {
	switch {
	case s.caFile != "":
		fmt.Fprintf(w, "kv: TLS with a self-signed certificate for %s; its certificate (PEM) is %s: redis-cli --tls --cacert %s -p %s\n",
			strings.Join(s.hosts, ", "), s.caFile, s.caFile, port)
	default:
		fmt.Fprintf(w, "kv: TLS with the certificate given\n")
	}
	if s.config.ClientAuth == tls.RequireAndVerifyClientCert {
		fmt.Fprintf(w, "kv: every client must present a certificate that -tls-client-ca verifies\n")
	}
	if len(s.config.NextProtos) > 0 {
		fmt.Fprintf(w, "kv: ALPN protocols offered: %s\n", strings.Join(s.config.NextProtos, ", "))
	}
}

// close removes the temporary certificate file, if one was written.
func (s *tlsSetup) close() {
	if s != nil && s.temp {
		os.Remove(s.caFile)
	}
}

// tlsReport renders the server's TLS counters on one line, such as
//
//	kv: TLS handshakes: 950 completed, 0 in progress, 1 timed out, 0 refused (too many at once); failed: eof 1, not-tls 1; handshake p50 277ms, p99 1.2s
func tlsReport(st conn.TLSStats) string {
	return fmt.Sprintf("kv: TLS handshakes: %d completed, %d in progress, %d timed out, %d refused (too many at once); failed: %s; handshake p50 %v, p99 %v\n",
		st.Handshakes, st.InProgress, st.TimedOut, st.Refused, counts(st.Failed), st.P50.Round(time.Microsecond), st.P99.Round(time.Microsecond))
}
