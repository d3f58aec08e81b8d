package hpack

import (
	"bytes"
	"encoding/hex"
	"strings"
	"testing"
)

// dehex decodes the RFC's hex dumps, which group digits with spaces.
func dehex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.Join(strings.Fields(s), ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func decodeAll(d *Decoder, block []byte) ([]Field, error) {
	var out []Field
	err := d.Decode(block, func(f Field) error {
		out = append(out, f)
		return nil
	})
	return out, err
}

// tableFields lists a dynamic table newest first, as the RFC prints it.
func tableFields(t *dynamicTable) []Field {
	var out []Field
	for i := 1; i <= t.len(); i++ {
		out = append(out, t.at(i))
	}
	return out
}

func equalFields(a, b []Field) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestIntegerC1 checks the integer examples of RFC 7541 C.1.
func TestIntegerC1(t *testing.T) {
	cases := []struct {
		v    uint64
		n    uint
		want string
	}{
		{10, 5, "0a"},       // C.1.1
		{1337, 5, "1f9a0a"}, // C.1.2
		{42, 8, "2a"},       // C.1.3
		{31, 5, "1f00"},     // the prefix exactly full
		{maxInt, 5, "1fe0ffffff0f"},
	}
	for _, c := range cases {
		got := appendInt(nil, 0, c.n, c.v)
		if hex.EncodeToString(got) != c.want {
			t.Errorf("appendInt(%d, %d) = %x, want %s", c.v, c.n, got, c.want)
		}
		v, rest, err := readInt(got, c.n)
		if err != nil || v != c.v || len(rest) != 0 {
			t.Errorf("readInt(%x) = %d, %x, %v; want %d", got, v, rest, err, c.v)
		}
	}
}

type rfcStep struct {
	block  string
	fields []Field
	table  []Field // newest first
	size   uint32
}

func testDecodeSteps(t *testing.T, tableSize uint32, steps []rfcStep) {
	t.Helper()
	d := NewDecoder(tableSize, 0)
	for i, s := range steps {
		got, err := decodeAll(d, dehex(t, s.block))
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if !equalFields(got, s.fields) {
			t.Errorf("step %d: fields %+v, want %+v", i, got, s.fields)
		}
		if tf := tableFields(&d.table); !equalFields(tf, s.table) {
			t.Errorf("step %d: table %+v, want %+v", i, tf, s.table)
		}
		if d.table.size != s.size {
			t.Errorf("step %d: table size %d, want %d", i, d.table.size, s.size)
		}
	}
}

func testEncodeSteps(t *testing.T, tableSize uint32, huffman bool, steps []rfcStep) {
	t.Helper()
	e := NewEncoder()
	e.table.maxSize = tableSize // as if both sides started with this size
	e.noHuffman = !huffman
	for i, s := range steps {
		var got []byte
		for _, f := range s.fields {
			got = e.AppendField(got, f)
		}
		if want := dehex(t, s.block); !bytes.Equal(got, want) {
			t.Errorf("step %d: encoded\n%x, want\n%x", i, got, want)
		}
		if tf := tableFields(&e.table); !equalFields(tf, s.table) {
			t.Errorf("step %d: table %+v, want %+v", i, tf, s.table)
		}
		if e.table.size != s.size {
			t.Errorf("step %d: table size %d, want %d", i, e.table.size, s.size)
		}
	}
}

// TestLiteralsC2 decodes the single representations of RFC 7541 C.2.
func TestLiteralsC2(t *testing.T) {
	ck := Field{Name: "custom-key", Value: "custom-header"}
	// C.2.1: literal with indexing.
	testDecodeSteps(t, 4096, []rfcStep{{
		"400a 6375 7374 6f6d 2d6b 6579 0d63 7573 746f 6d2d 6865 6164 6572",
		[]Field{ck}, []Field{ck}, 55,
	}})
	// C.2.2: literal without indexing.
	testDecodeSteps(t, 4096, []rfcStep{{
		"040c 2f73 616d 706c 652f 7061 7468",
		[]Field{{Name: ":path", Value: "/sample/path"}}, nil, 0,
	}})
	// C.2.3: never indexed, reported as Sensitive.
	testDecodeSteps(t, 4096, []rfcStep{{
		"1008 7061 7373 776f 7264 0673 6563 7265 74",
		[]Field{{Name: "password", Value: "secret", Sensitive: true}}, nil, 0,
	}})
	// C.2.4: indexed.
	testDecodeSteps(t, 4096, []rfcStep{{
		"82", []Field{{Name: ":method", Value: "GET"}}, nil, 0,
	}})

	e := NewEncoder()
	e.noHuffman = true
	got := e.AppendField(nil, Field{Name: "password", Value: "secret", Sensitive: true})
	if want := dehex(t, "1008 7061 7373 776f 7264 0673 6563 7265 74"); !bytes.Equal(got, want) {
		t.Errorf("sensitive field encoded %x, want %x", got, want)
	}
	if e.table.len() != 0 {
		t.Errorf("sensitive field entered the table")
	}
}

var (
	reqGET     = Field{Name: ":method", Value: "GET"}
	reqHTTP    = Field{Name: ":scheme", Value: "http"}
	reqRoot    = Field{Name: ":path", Value: "/"}
	reqIndex   = Field{Name: ":path", Value: "/index.html"}
	reqAuth    = Field{Name: ":authority", Value: "www.example.com"}
	reqNoCache = Field{Name: "cache-control", Value: "no-cache"}
	reqCustom  = Field{Name: "custom-key", Value: "custom-value"}

	requestSteps = func(b1, b2, b3 string) []rfcStep {
		return []rfcStep{
			{b1, []Field{reqGET, reqHTTP, reqRoot, reqAuth}, []Field{reqAuth}, 57},
			{b2, []Field{reqGET, reqHTTP, reqRoot, reqAuth, reqNoCache}, []Field{reqNoCache, reqAuth}, 110},
			{b3, []Field{reqGET, {Name: ":scheme", Value: "https"}, reqIndex, reqAuth, reqCustom},
				[]Field{reqCustom, reqNoCache, reqAuth}, 164},
		}
	}
	c3 = requestSteps(
		"8286 8441 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d",
		"8286 84be 5808 6e6f 2d63 6163 6865",
		"8287 85bf 400a 6375 7374 6f6d 2d6b 6579 0c63 7573 746f 6d2d 7661 6c75 65",
	)
	c4 = requestSteps(
		"8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff",
		"8286 84be 5886 a8eb 1064 9cbf",
		"8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf",
	)

	resp302    = Field{Name: ":status", Value: "302"}
	resp307    = Field{Name: ":status", Value: "307"}
	respCC     = Field{Name: "cache-control", Value: "private"}
	respDate1  = Field{Name: "date", Value: "Mon, 21 Oct 2013 20:13:21 GMT"}
	respDate2  = Field{Name: "date", Value: "Mon, 21 Oct 2013 20:13:22 GMT"}
	respLoc    = Field{Name: "location", Value: "https://www.example.com"}
	respGzip   = Field{Name: "content-encoding", Value: "gzip"}
	respCookie = Field{Name: "set-cookie", Value: "foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1"}

	responseSteps = func(b1, b2, b3 string) []rfcStep {
		return []rfcStep{
			{b1, []Field{resp302, respCC, respDate1, respLoc}, []Field{respLoc, respDate1, respCC, resp302}, 222},
			{b2, []Field{resp307, respCC, respDate1, respLoc}, []Field{resp307, respLoc, respDate1, respCC}, 222},
			{b3, []Field{{Name: ":status", Value: "200"}, respCC, respDate2, respLoc, respGzip, respCookie},
				[]Field{respCookie, respGzip, respDate2}, 215},
		}
	}
	c5 = responseSteps(
		"4803 3330 3258 0770 7269 7661 7465 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 2032 303a 3133 3a32 3120 474d 546e 1768 7474 7073 3a2f 2f77 7777 2e65 7861 6d70 6c65 2e63 6f6d",
		"4803 3330 37c1 c0bf",
		"88c1 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 2032 303a 3133 3a32 3220 474d 54c0 5a04 677a 6970 7738 666f 6f3d 4153 444a 4b48 514b 425a 584f 5157 454f 5049 5541 5851 5745 4f49 553b 206d 6178 2d61 6765 3d33 3630 303b 2076 6572 7369 6f6e 3d31",
	)
	c6 = responseSteps(
		"4882 6402 5885 aec3 771a 4b61 96d0 7abe 9410 54d4 44a8 2005 9504 0b81 66e0 82a6 2d1b ff6e 919d 29ad 1718 63c7 8f0b 97c8 e9ae 82ae 43d3",
		"4883 640e ffc1 c0bf",
		"88c1 6196 d07a be94 1054 d444 a820 0595 040b 8166 e084 a62d 1bff c05a 839b d9ab 77ad 94e7 821d d7f2 e6c7 b335 dfdf cd5b 3960 d5af 2708 7f36 72c1 ab27 0fb5 291f 9587 3160 65c0 03ed 4ee5 b106 3d50 07",
	)
)

// TestRequestsC3 and the following decode and encode the header block
// sequences of RFC 7541 C.3 to C.6, checking the dynamic table after
// each block. The Encoder's choices coincide with the RFC's there.
func TestRequestsC3(t *testing.T) {
	testDecodeSteps(t, 4096, c3)
	testEncodeSteps(t, 4096, false, c3)
}

func TestRequestsHuffmanC4(t *testing.T) {
	testDecodeSteps(t, 4096, c4)
	testEncodeSteps(t, 4096, true, c4)
}

func TestResponsesC5(t *testing.T) {
	testDecodeSteps(t, 256, c5)
	testEncodeSteps(t, 256, false, c5)
}

func TestResponsesHuffmanC6(t *testing.T) {
	testDecodeSteps(t, 256, c6)
	// "307" Huffman codes to 3 bytes, as long as it is raw: the RFC
	// codes it, the Encoder, which codes only when shorter, does not.
	steps := append([]rfcStep(nil), c6...)
	steps[1].block = "4803 3330 37c1 c0bf"
	testEncodeSteps(t, 256, true, steps)
}
