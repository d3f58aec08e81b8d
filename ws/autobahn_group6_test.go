package ws_test

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/gracepoll/gracepoll/ws"
)

// Group 6: UTF-8 handling. A text message that is valid UTF-8 is echoed;
// one that is not fails the connection with 1007, and (6.4.x) as soon as
// the first invalid octet arrives, before the rest of the message.

// κόσμε ("kosme"), Autobahn's (and Markus Kuhn's) valid multi-byte text.
const abKosme = "\xce\xba\xe1\xbd\xb9\xcf\x83\xce\xbc\xce\xb5"

// abInvalidKosme is κόσμε, a surrogate (U+D800), then "edited".
const abInvalidKosme = abKosme + "\xed\xa0\x80edited"

// abUTF8Sequence is one payload of 6.5-6.23.
type abUTF8Sequence struct {
	valid   bool
	payload string
}

// abUTF8Groups lists the payloads of 6.5-6.23, group by group, from
// Markus Kuhn's UTF-8 decoder stress test as Autobahn uses it.
func abUTF8Groups() [][]abUTF8Sequence {
	v := func(ss ...string) []abUTF8Sequence { return abSeqs(true, ss) }
	x := func(ss ...string) []abUTF8Sequence { return abSeqs(false, ss) }

	// 6.6: every prefix of κόσμε, valid where it ends on a code point.
	var prefixes []abUTF8Sequence
	for i := 1; i <= len(abKosme); i++ {
		prefixes = append(prefixes, abUTF8Sequence{utf8.ValidString(abKosme[:i]), abKosme[:i]})
	}
	// 6.12.8: all 64 continuation octets.
	var continuations []byte
	for b := 0x80; b <= 0xbf; b++ {
		continuations = append(continuations, byte(b))
	}
	// 6.13: each lonely start octet followed by a space.
	lonely := func(lo, hi int) string {
		var s []byte
		for b := lo; b <= hi; b++ {
			s = append(s, byte(b), ' ')
		}
		return string(s)
	}
	missingLast := []string{"\xc0", "\xe0\x80", "\xf0\x80\x80", "\xf8\x80\x80\x80", "\xfc\x80\x80\x80\x80",
		"\xdf", "\xef\xbf", "\xf7\xbf\xbf", "\xfb\xbf\xbf\xbf", "\xfd\xbf\xbf\xbf\xbf"}
	// 6.22: the noncharacters U+FFFE and U+FFFF of every plane, valid.
	var nonchars []string
	for plane := rune(0); plane <= 16; plane++ {
		nonchars = append(nonchars, string(plane<<16|0xfffe), string(plane<<16|0xffff))
	}
	var specials []string
	for r := rune(0xfff9); r <= 0xffff; r++ {
		specials = append(specials, string(r))
	}
	return [][]abUTF8Sequence{
		// 6.5 some valid UTF-8
		v("hello\x24world", "hello\xc2\xa2world", "hello\xe2\x82\xacworld", "hello\xf0\xa4\xad\xa2world", abKosme),
		// 6.6 prefixes of κόσμε
		prefixes,
		// 6.7 the first code point of each length
		v("\x00", "\xc2\x80", "\xe0\xa0\x80", "\xf0\x90\x80\x80"),
		// 6.8 the first 5- and 6-octet sequences (not UTF-8 since RFC 3629)
		x("\xf8\x88\x80\x80\x80", "\xfc\x84\x80\x80\x80\x80"),
		// 6.9 the last code point of each length
		v("\x7f", "\xdf\xbf", "\xef\xbf\xbf", "\xf4\x8f\xbf\xbf"),
		// 6.10 the last 4-, 5- and 6-octet sequences
		x("\xf7\xbf\xbf\xbf", "\xfb\xbf\xbf\xbf\xbf", "\xfd\xbf\xbf\xbf\xbf\xbf"),
		// 6.11 other boundaries: U+D7FF, U+E000, U+FFFD, U+10FFFF, then U+110000
		append(v("\xed\x9f\xbf", "\xee\x80\x80", "\xef\xbf\xbd", "\xf4\x8f\xbf\xbf"), x("\xf4\x90\x80\x80")...),
		// 6.12 unexpected continuation octets
		x("\x80", "\xbf", "\x80\xbf", "\x80\xbf\x80", "\x80\xbf\x80\xbf", "\x80\xbf\x80\xbf\x80",
			"\x80\xbf\x80\xbf\x80\xbf", string(continuations)),
		// 6.13 lonely start octets
		x(lonely(0xc0, 0xdf), lonely(0xe0, 0xef), lonely(0xf0, 0xf7), lonely(0xf8, 0xfb), lonely(0xfc, 0xfd)),
		// 6.14 sequences with their last continuation octet missing
		x(missingLast...),
		// 6.15 all of 6.14 concatenated
		x(strings.Join(missingLast, "")),
		// 6.16 impossible octets
		x("\xfe", "\xff", "\xfe\xfe\xff\xff"),
		// 6.17 overlong "/"
		x("\xc0\xaf", "\xe0\x80\xaf", "\xf0\x80\x80\xaf", "\xf8\x80\x80\x80\xaf", "\xfc\x80\x80\x80\x80\xaf"),
		// 6.18 the largest overlong sequences
		x("\xc1\xbf", "\xe0\x9f\xbf", "\xf0\x8f\xbf\xbf", "\xf8\x87\xbf\xbf\xbf", "\xfc\x83\xbf\xbf\xbf\xbf"),
		// 6.19 overlong NUL
		x("\xc0\x80", "\xe0\x80\x80", "\xf0\x80\x80\x80", "\xf8\x80\x80\x80\x80", "\xfc\x80\x80\x80\x80\x80"),
		// 6.20 single UTF-16 surrogates
		x("\xed\xa0\x80", "\xed\xad\xbf", "\xed\xae\x80", "\xed\xaf\xbf", "\xed\xb0\x80", "\xed\xbe\x80", "\xed\xbf\xbf"),
		// 6.21 paired UTF-16 surrogates
		x("\xed\xa0\x80\xed\xb0\x80", "\xed\xa0\x80\xed\xbf\xbf", "\xed\xad\xbf\xed\xb0\x80", "\xed\xad\xbf\xed\xbf\xbf",
			"\xed\xae\x80\xed\xb0\x80", "\xed\xae\x80\xed\xbf\xbf", "\xed\xaf\xbf\xed\xb0\x80", "\xed\xaf\xbf\xed\xbf\xbf"),
		// 6.22 noncharacters: valid UTF-8
		v(nonchars...),
		// 6.23 the specials U+FFF9-U+FFFF: valid
		v(specials...),
	}
}

func abSeqs(valid bool, ss []string) []abUTF8Sequence {
	out := make([]abUTF8Sequence, len(ss))
	for i, s := range ss {
		out[i] = abUTF8Sequence{valid, s}
	}
	return out
}

// abTextFrames sends text as a message in frames of n octets (all of it
// in one frame if n is 0), in one write.
func abTextFrames(c *rawClient, text []byte, n int) {
	if n == 0 {
		c.sendFrame(true, 0, ws.OpText, text)
		return
	}
	var frames [][]byte
	op := ws.OpText
	for i := 0; i < len(text); i += n {
		frames = append(frames, c.frame(i+n >= len(text), 0, op, text[i:min(i+n, len(text))]))
		op = ws.OpContinuation
	}
	c.send(abOneChop, frames...)
}

// abFailFast sends parts of one text message: parts[0], then after a
// pause parts[1], which makes it invalid, then parts[2]. The server must
// have failed the connection with 1007 before parts[2] goes out. Each
// part is a frame of its own (frames) or a piece of one frame.
func abFailFast(parts [3]string, frames bool) func(*testing.T, *rawClient) {
	return func(t *testing.T, c *rawClient) {
		var chunks [3][]byte
		if frames {
			chunks[0] = c.frame(false, 0, ws.OpText, []byte(parts[0]))
			chunks[1] = c.frame(false, 0, ws.OpContinuation, []byte(parts[1]))
			chunks[2] = c.frame(true, 0, ws.OpContinuation, []byte(parts[2]))
		} else {
			f := c.frame(true, 0, ws.OpText, []byte(parts[0]+parts[1]+parts[2]))
			hdr := len(f) - len(parts[0]+parts[1]+parts[2])
			a, b := hdr+len(parts[0]), hdr+len(parts[0])+len(parts[1])
			chunks = [3][]byte{f[:a], f[a:b], f[b:]}
		}
		c.write(chunks[0])
		c.expectSilence(abWait / 4) // valid so far: nothing may be answered
		c.write(chunks[1])
		// The close must come now, before the rest is sent (abTimeout
		// only bounds a server that never sends it).
		c.expectClose(1007)
		c.write(chunks[2])
	}
}

func abGroup6() []abCase {
	echo := func(text []byte, n int) func(*testing.T, *rawClient) {
		return func(t *testing.T, c *rawClient) {
			abTextFrames(c, text, n)
			c.expectMessage(ws.OpText, text)
			c.closeNormal()
		}
	}
	invalid := func(text []byte, n int) func(*testing.T, *rawClient) {
		return func(t *testing.T, c *rawClient) {
			abTextFrames(c, text, n)
			c.expectClose(1007)
		}
	}
	hello := []byte("Hello-\xc2\xb5@\xc3\x9f\xc3\xb6\xc3\xa4\xc3\xbc\xc3\xa0\xc3\xa1-UTF-8!!")
	cs := []abCase{
		{ID: "6.1.1", Desc: "Send text message of length 0.", Run: echo(nil, 0)},
		{ID: "6.1.2", Desc: "Send fragmented text message, 3 fragments each of length 0.",
			Run: func(t *testing.T, c *rawClient) {
				c.send(abOneChop, c.frame(false, 0, ws.OpText, nil), c.frame(false, 0, ws.OpContinuation, nil),
					c.frame(true, 0, ws.OpContinuation, nil))
				c.expectMessage(ws.OpText, nil)
				c.closeNormal()
			}},
		{ID: "6.1.3", Desc: "Send fragmented text message, 3 fragments, first and last of length 0, middle non-empty.",
			Run: func(t *testing.T, c *rawClient) {
				mid := []byte("middle frame payload")
				c.send(abOneChop, c.frame(false, 0, ws.OpText, nil), c.frame(false, 0, ws.OpContinuation, mid),
					c.frame(true, 0, ws.OpContinuation, nil))
				c.expectMessage(ws.OpText, mid)
				c.closeNormal()
			}},
		{ID: "6.2.1", Desc: "Send a valid UTF-8 text message in one fragment.", Run: echo(hello, 0)},
		{ID: "6.2.2", Desc: "Send a valid UTF-8 text message in two fragments, fragmented on a code point boundary.",
			Run: func(t *testing.T, c *rawClient) {
				cut := bytes.IndexByte(hello, '@') // after "Hello-µ"
				c.send(abOneChop, c.frame(false, 0, ws.OpText, hello[:cut]), c.frame(true, 0, ws.OpContinuation, hello[cut:]))
				c.expectMessage(ws.OpText, hello)
				c.closeNormal()
			}},
		{ID: "6.2.3", Desc: "Send a valid UTF-8 text message in fragments of 1 octet, ending frames inside code points.", Run: echo(hello, 1)},
		{ID: "6.2.4", Desc: "Send κόσμε in fragments of 1 octet, ending frames inside code points.", Run: echo([]byte(abKosme), 1)},
		{ID: "6.3.1", Desc: "Send invalid UTF-8 text message unfragmented.", Run: invalid([]byte(abInvalidKosme), 0)},
		{ID: "6.3.2", Desc: "Send invalid UTF-8 text message in fragments of 1 octet.", Run: invalid([]byte(abInvalidKosme), 1)},
		{ID: "6.4.1", Desc: "Fail fast: 3 fragments, the 2nd (U+110000 encoded) invalid; the close must precede the 3rd.",
			Run: abFailFast([3]string{abKosme, "\xf4\x90\x80\x80", "edited"}, true)},
		{ID: "6.4.2", Desc: "Fail fast: 3 fragments, the 2nd (one octet) makes the 1st's last octet invalid; the close must precede the 3rd.",
			Run: abFailFast([3]string{abKosme + "\xf4", "\x90", "\x80\x80edited"}, true)},
		{ID: "6.4.3", Desc: "Fail fast: one frame in 3 chops, the 2nd (U+110000 encoded) invalid; the close must precede the 3rd.",
			Run: abFailFast([3]string{abKosme, "\xf4\x90\x80\x80", "edited"}, false)},
		{ID: "6.4.4", Desc: "Fail fast: one frame in 3 chops, the 2nd (one octet) invalid; the close must precede the 3rd.",
			Run: abFailFast([3]string{abKosme + "\xf4", "\x90", "\x80\x80edited"}, false)},
	}
	for g, seqs := range abUTF8Groups() {
		for i, s := range seqs {
			run, what := invalid([]byte(s.payload), 0), "not"
			if s.valid {
				run, what = echo([]byte(s.payload), 0), "valid"
			}
			if s.valid != utf8.ValidString(s.payload) {
				panic(fmt.Sprintf("6.%d.%d: the table says valid %v for %q", g+5, i+1, s.valid, s.payload))
			}
			cs = append(cs, abCase{
				ID:   fmt.Sprintf("6.%d.%d", g+5, i+1),
				Desc: fmt.Sprintf("Send a text message whose payload %q is %s UTF-8, in one fragment.", s.payload, what),
				Run:  run,
			})
		}
	}
	return cs
}
