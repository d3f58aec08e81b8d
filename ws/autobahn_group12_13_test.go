package ws_test

import (
	"bytes"
	"compress/flate"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/gracepoll/gracepoll/ws"
)

// Groups 12 and 13: permessage-deflate (RFC 7692). Each case sends
// compressed messages of one size, in one frame or auto-fragmented into
// frames of 256 octets, each after the echo of the one before, and checks
// the echo: compressed (RSV1) from 64 octets on, as this server
// compresses, and inflating to the message. Group 12 varies the payload
// (five kinds, generated here), group 13 the client's offer. Every case
// runs twice: against a server with Upgrader.ContextTakeover (the client
// then compresses each message against the ones before) and one without
// (it answers client_no_context_takeover and the client compresses each
// message alone).

// abDeflateSizes are the 18 cases of each subgroup: message sizes in one
// frame, then auto-fragmented at 256 octets.
var abDeflateSizes = []struct{ size, frag int }{
	{16, 0}, {64, 0}, {256, 0}, {1024, 0}, {4096, 0}, {8192, 0}, {16384, 0}, {32768, 0}, {65536, 0}, {131072, 0},
	{256, 256}, {1024, 256}, {4096, 256}, {8192, 256}, {16384, 256}, {32768, 256}, {65536, 256}, {131072, 256},
}

// abDeflateCount is how many messages a case sends: Autobahn's 1000,
// fewer for the large sizes (a case's payloads total at most 512 KiB,
// and at least 4 messages), and fewer still under the race detector or
// -short (32 KiB, at most 50 messages, at least 2). 216 cases, each run
// twice, would otherwise take minutes.
func abDeflateCount(size int) int {
	budget, most, least := 512<<10, 1000, 4
	if autobahnRace || testing.Short() {
		budget, most, least = 32<<10, 50, 2
	}
	return max(least, min(most, budget/size))
}

// abOffer is one permessage-deflate offer as Autobahn describes it:
// whether it asks the server not to keep its window, and the window size
// it asks the server to use (0: none asked).
type abOffer struct {
	noContext bool
	bits      int
}

func (o abOffer) String() string {
	s := "permessage-deflate; client_max_window_bits"
	if o.noContext {
		s += "; server_no_context_takeover"
	}
	if o.bits != 0 {
		s += "; server_max_window_bits=" + strconv.Itoa(o.bits)
	}
	return s
}

func abGroup12() []abCase {
	var cs []abCase
	for g, corpus := range abCorpora() {
		for i, s := range abDeflateSizes {
			cs = append(cs, abDeflateCase(fmt.Sprintf("12.%d.%d", g+1, i+1), corpus, []abOffer{{}}, s.size, s.frag))
		}
	}
	return cs
}

func abGroup13() []abCase {
	offers := [][]abOffer{
		{{}},
		{{noContext: true}},
		{{bits: 8}},
		{{bits: 15}},
		{{noContext: true, bits: 8}},
		{{noContext: true, bits: 15}},
		{{bits: 8}, {noContext: true}, {}},
	}
	json := abCorpora()[0]
	var cs []abCase
	for g, offer := range offers {
		for i, s := range abDeflateSizes {
			cs = append(cs, abDeflateCase(fmt.Sprintf("13.%d.%d", g+1, i+1), json, offer, s.size, s.frag))
		}
	}
	return cs
}

func abDeflateCase(id string, corpus abCorpus, offers []abOffer, size, frag int) abCase {
	strs := make([]string, len(offers))
	for i, o := range offers {
		strs[i] = o.String()
	}
	offer := strings.Join(strs, ", ")
	return abCase{
		ID: id,
		Desc: fmt.Sprintf("Send %d compressed %s messages of %d octets, auto-fragmented to %d octets, offering %q.",
			abDeflateCount(size), corpus.name, size, frag, offer),
		Path:  "/deflate",
		Offer: offer,
		Run: func(t *testing.T, c *rawClient) {
			// The server agrees the first offer: every one here is valid.
			t.Run("takeover", func(t *testing.T) { abDeflateRun(t, c, corpus, offers[0], true, size, frag) })
			t.Run("no-takeover", func(t *testing.T) {
				abDeflateRun(t, abDial(t, "/deflate-nctx", offer), corpus, offers[0], false, size, frag)
			})
		},
	}
}

// abAgreed is a permessage-deflate answer, parsed.
type abAgreed struct {
	serverNoContext, clientNoContext bool
	serverBits, clientBits           int // 0 when absent
}

// abParseAnswer parses the server's Sec-WebSocket-Extensions answer: one
// permessage-deflate with known parameters, none twice, windows 8-15.
func abParseAnswer(t *testing.T, answer string) abAgreed {
	t.Helper()
	parts := strings.Split(answer, ";")
	if strings.TrimSpace(parts[0]) != "permessage-deflate" {
		t.Fatalf("answer %q does not agree permessage-deflate (alone)", answer)
	}
	var a abAgreed
	seen := map[string]bool{}
	for _, p := range parts[1:] {
		k, v, hasValue := strings.Cut(strings.TrimSpace(p), "=")
		if seen[k] {
			t.Fatalf("answer %q repeats %s", answer, k)
		}
		seen[k] = true
		bits := func() int {
			n, err := strconv.Atoi(strings.Trim(v, `"`))
			if !hasValue || err != nil || n < 8 || n > 15 {
				t.Fatalf("answer %q: %s=%q", answer, k, v)
			}
			return n
		}
		switch k {
		case "server_no_context_takeover", "client_no_context_takeover":
			if hasValue {
				t.Fatalf("answer %q: %s has a value", answer, k)
			}
			if k[0] == 's' {
				a.serverNoContext = true
			} else {
				a.clientNoContext = true
			}
		case "server_max_window_bits":
			a.serverBits = bits()
		case "client_max_window_bits":
			a.clientBits = bits()
		default:
			t.Fatalf("answer %q: unknown parameter %q", answer, k)
		}
	}
	return a
}

// abDeflateRun checks the server's answer to offer and sends the case's
// messages, compressed, through c.
func abDeflateRun(t *testing.T, c *rawClient, corpus abCorpus, offer abOffer, takeover bool, size, frag int) {
	c.t = t
	a := abParseAnswer(t, c.ext)
	switch {
	case offer.noContext && !a.serverNoContext:
		t.Fatalf("answer %q ignores server_no_context_takeover", c.ext)
	case a.clientNoContext == takeover:
		t.Fatalf("answer %q from a server with ContextTakeover %v", c.ext, takeover)
	// RFC 7692 section 7.1.2.1: the server accepts server_max_window_bits
	// by answering it, with the same or a smaller value.
	case offer.bits != 0 && (a.serverBits == 0 || a.serverBits > offer.bits):
		t.Fatalf("answer %q to server_max_window_bits=%d", c.ext, offer.bits)
	// Go's compressor has no window below 15: the client could not obey.
	case a.clientBits != 0 && a.clientBits != 15:
		t.Fatalf("answer %q limits the client's window", c.ext)
	}
	// zlib's default level, as Autobahn's client; the fastest under the
	// race detector, where compressing dominates the suite's time.
	level := flate.DefaultCompression
	if autobahnRace {
		level = flate.BestSpeed
	}
	zw, _ := flate.NewWriter(nil, level)
	var zbuf bytes.Buffer
	zw.Reset(&zbuf)
	var window []byte // the server's window, if it keeps it
	count := abDeflateCount(size)
	for i := range count {
		msg := corpus.slice(i, size)
		// Compress: against the messages before if the server allows it
		// (Autobahn's client does), each alone if not.
		zbuf.Reset()
		if a.clientNoContext {
			zw.Reset(&zbuf)
		}
		zw.Write(msg)
		zw.Flush()
		z := zbuf.Bytes()
		if !bytes.HasSuffix(z, []byte{0, 0, 0xff, 0xff}) {
			t.Fatalf("flush did not end with 00 00 ff ff")
		}
		z = z[:len(z)-4]
		var frames [][]byte
		if frag == 0 {
			frames = append(frames, c.frame(true, 4, corpus.op, z))
		} else {
			op, rsv := corpus.op, byte(4)
			for j := 0; j == 0 || j < len(z); j += frag {
				frames = append(frames, c.frame(j+frag >= len(z), rsv, op, z[j:min(j+frag, len(z))]))
				op, rsv = ws.OpContinuation, 0
			}
		}
		c.send(abOneChop, frames...)

		f := c.next()
		if f.op != corpus.op {
			t.Fatalf("message %d: got %v, want %v", i, f, corpus.op)
		}
		compressed := f.rsv == 4
		if want := size >= 64; compressed != want {
			t.Fatalf("message %d of %d octets: echo compressed %v, want %v", i, size, compressed, want)
		}
		echo := f.payload
		for !f.fin {
			if f = c.next(); f.op != ws.OpContinuation || f.rsv != 0 {
				t.Fatalf("message %d: got %v within it", i, f)
			}
			echo = append(echo, f.payload...)
		}
		if compressed {
			// The server has no smaller window than 15 than no window at
			// all: Huffman codes alone cannot take this text below half.
			if a.serverBits != 0 && a.serverBits < 15 && size >= 1024 && len(echo) < size/2 {
				t.Fatalf("message %d: %d octets compressed to %d: back-references beyond a %d-bit window?", i, size, len(echo), a.serverBits)
			}
			var dict []byte
			if !a.serverNoContext {
				dict = window
			}
			in := io.MultiReader(bytes.NewReader(echo), bytes.NewReader([]byte{0, 0, 0xff, 0xff, 1, 0, 0, 0xff, 0xff}))
			inflated, err := io.ReadAll(flate.NewReaderDict(in, dict))
			if err != nil {
				t.Fatalf("message %d: inflating the echo: %v", i, err)
			}
			echo = inflated
			window = append(window, echo...)
			window = window[max(0, len(window)-32<<10):]
		}
		if !bytes.Equal(echo, msg) {
			t.Fatalf("message %d: echo of %d octets differs from the %d sent at %d", i, len(echo), len(msg), abFirstDiff(echo, msg))
		}
	}
	c.closeNormal()
}

// abCorpus is a payload kind of group 12, generated (deterministically)
// to resemble Autobahn's data files.
type abCorpus struct {
	name string
	op   ws.Opcode
	data []byte
}

// slice is message i of size octets: a window into the corpus moving
// with i, so that context takeover meets both repeats and new text; for
// text it starts and ends on code point boundaries.
func (c abCorpus) slice(i, size int) []byte {
	span := len(c.data) - size + 1
	start := i * 7919 % span
	for c.op == ws.OpText && (!utf8.RuneStart(c.data[start]) || start+size < len(c.data) && !utf8.RuneStart(c.data[start+size])) {
		start = (start + 1) % span
	}
	return c.data[start : start+size]
}

var abCorpora = sync.OnceValue(func() []abCorpus {
	return []abCorpus{
		{"JSON text", ws.OpText, abJSON(194056)},
		{"bitmap", ws.OpBinary, abBitmap(512, 512)},
		{"German text", ws.OpText, abGerman(222218)},
		{"HTML text", ws.OpText, abHTML(263527)},
		{"PDF-like binary", ws.OpBinary, abPDF(1042328)},
	}
})

// abJSON is an array of records like a generated test data set, at
// least n octets.
func abJSON(n int) []byte {
	r := rand.New(rand.NewPCG(12, 1))
	first := []string{"Ada", "Bruno", "Chiara", "Dmitri", "Elif", "Farah", "Gustav", "Hana", "Ivo", "Jun"}
	last := []string{"Lovelace", "Keller", "Rossi", "Petrov", "Yilmaz", "Haddad", "Berg", "Sato", "Novak", "Lee"}
	tags := []string{"alpha", "beta", "gamma", "delta", "omega", "sigma", "kappa", "lambda"}
	var b strings.Builder
	b.WriteString("[\n")
	for id := 0; b.Len() < n; id++ {
		if id > 0 {
			b.WriteString(",\n")
		}
		fn, ln := first[r.IntN(len(first))], last[r.IntN(len(last))]
		fmt.Fprintf(&b, `  {"id": %d, "guid": "%08x-%04x-%04x", "isActive": %v, "balance": "$%d,%03d.%02d", "age": %d,`,
			id, r.Uint32(), r.IntN(1<<16), r.IntN(1<<16), r.IntN(2) == 0, r.IntN(10), r.IntN(1000), r.IntN(100), 20+r.IntN(50))
		fmt.Fprintf(&b, ` "name": "%s %s", "email": "%s.%s@example.com", "latitude": %.6f, "longitude": %.6f,`,
			fn, ln, strings.ToLower(fn), strings.ToLower(ln), r.Float64()*180-90, r.Float64()*360-180)
		fmt.Fprintf(&b, ` "tags": ["%s", "%s", "%s"], "friends": [{"id": %d, "name": "%s %s"}]}`,
			tags[r.IntN(len(tags))], tags[r.IntN(len(tags))], tags[r.IntN(len(tags))], r.IntN(100),
			first[r.IntN(len(first))], last[r.IntN(len(last))])
	}
	b.WriteString("\n]\n")
	return []byte(b.String())
}

// abBitmap is a BMP file of an 8-bit grey w×h picture: smooth shapes
// with some noise, as a photograph.
func abBitmap(w, h int) []byte {
	r := rand.New(rand.NewPCG(12, 2))
	const headers = 14 + 40 + 256*4
	b := make([]byte, headers, headers+w*h)
	copy(b, "BM")
	le := binary.LittleEndian
	le.PutUint32(b[2:], uint32(headers+w*h))
	le.PutUint32(b[10:], headers)
	le.PutUint32(b[14:], 40)
	le.PutUint32(b[18:], uint32(w))
	le.PutUint32(b[22:], uint32(h))
	le.PutUint16(b[26:], 1)
	le.PutUint16(b[28:], 8)
	le.PutUint32(b[34:], uint32(w*h))
	le.PutUint32(b[46:], 256)
	for i := range 256 {
		p := b[54+4*i:]
		p[0], p[1], p[2] = byte(i), byte(i), byte(i)
	}
	for y := range h {
		for x := range w {
			v := 128 + 70*math.Sin(float64(x)/23)*math.Cos(float64(y)/31) + 30*math.Sin(float64(x+y)/57) + float64(r.IntN(16)-8)
			b = append(b, byte(max(0, min(255, v))))
		}
	}
	return b
}

// abGerman is German verse with its umlauts and ß, at least n octets.
func abGerman(n int) []byte {
	r := rand.New(rand.NewPCG(12, 3))
	speakers := []string{"FAUST", "MEPHISTOPHELES", "MARGARETE", "WAGNER", "MARTHE", "CHOR DER ENGEL"}
	words := strings.Fields(`und der die das ich nicht ein zu ist es mich mir wie so was sich mit auf
		Geist Welt Natur Himmel Erde Herz Nacht Tag Blut Seele Gott Teufel Liebe Wissen Buch
		schön süß grün müde trüb größer weiß kühl früh spät über für während schließlich
		Bücher Träume Mädchen Frühling Blüte Öl Ärger Übermut Straße Fuß Gruß Maß Schoß
		fühlen hören küssen öffnen zählen wählen müssen dürfen können träumen schaffen streben`)
	var b strings.Builder
	for b.Len() < n {
		b.WriteString(speakers[r.IntN(len(speakers))] + ":\n")
		for range 2 + r.IntN(6) {
			k := 4 + r.IntN(6)
			for j := range k {
				w := words[r.IntN(len(words))]
				if j == 0 {
					first, size := utf8.DecodeRuneInString(w)
					w = strings.ToUpper(string(first)) + w[size:]
				} else {
					b.WriteByte(' ')
				}
				b.WriteString(w)
			}
			b.WriteString([]string{",", ".", "!", "?", ";"}[r.IntN(5)] + "\n")
		}
		b.WriteString("\n")
	}
	return []byte(b.String())
}

// abHTML is a long HTML page of sections, tables and links, at least n
// octets.
func abHTML(n int) []byte {
	r := rand.New(rand.NewPCG(12, 4))
	words := strings.Fields("lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor incididunt ut labore et dolore magna aliqua")
	text := func(k int) string {
		s := make([]string, k)
		for i := range s {
			s[i] = words[r.IntN(len(words))]
		}
		return strings.Join(s, " ")
	}
	var b strings.Builder
	b.WriteString("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>Report</title>\n")
	b.WriteString("<style>body { font-family: sans-serif; } td { padding: 2px 6px; } .odd { background: #eee; }</style>\n</head>\n<body>\n")
	for s := 0; b.Len() < n; s++ {
		fmt.Fprintf(&b, "<div class=\"section\" id=\"s%d\">\n<h2>%s</h2>\n<p>%s</p>\n<table>\n", s, text(3), text(40+r.IntN(40)))
		for row := range 3 + r.IntN(8) {
			class := "even"
			if row%2 == 1 {
				class = "odd"
			}
			fmt.Fprintf(&b, "<tr class=\"%s\"><td>%d</td><td>%s</td><td>%.2f</td><td><a href=\"/item/%d?ref=s%d\">%s</a></td></tr>\n",
				class, row, text(2), r.Float64()*1000, r.IntN(100000), s, text(1))
		}
		b.WriteString("</table>\n</div>\n")
	}
	b.WriteString("</body>\n</html>\n")
	return []byte(b.String())
}

// abPDF is shaped as a PDF of n octets: object dictionaries in text
// around streams of (incompressible, as a PDF's are deflated) random
// octets, then a cross-reference table.
func abPDF(n int) []byte {
	r := rand.New(rand.NewPCG(12, 5))
	b := []byte("%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
	var offsets []int
	for obj := 1; len(b) < n-4096; obj++ {
		offsets = append(offsets, len(b))
		if obj%3 != 0 {
			b = fmt.Appendf(b, "%d 0 obj\n<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents %d 0 R /Resources << /Font << /F1 5 0 R >> >> >>\nendobj\n", obj, obj+1)
			continue
		}
		k := min(1024+r.IntN(8192), n-len(b))
		b = fmt.Appendf(b, "%d 0 obj\n<< /Length %d /Filter /FlateDecode >>\nstream\n", obj, k)
		for range k {
			b = append(b, byte(r.Uint32()))
		}
		b = append(b, "\nendstream\nendobj\n"...)
	}
	xref := len(b)
	b = fmt.Appendf(b, "xref\n0 %d\n0000000000 65535 f \n", len(offsets)+1)
	for _, o := range offsets {
		b = fmt.Appendf(b, "%010d 00000 n \n", o)
	}
	b = fmt.Appendf(b, "trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n", len(offsets)+1, xref)
	return b
}
