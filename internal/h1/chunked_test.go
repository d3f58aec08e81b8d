package h1

import (
	"io"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// decodeAll decodes in, handed over step bytes at a time (all at once if
// step is 0) as a caller appending reads to its unconsumed bytes would, each
// time in a new buffer, and returns the body, the trailers as "Name: value",
// and the bytes consumed.
func decodeAll(d *ChunkedDecoder, in string, step int) (string, []string, int, error) {
	if step == 0 {
		step = len(in)
	}
	var body strings.Builder
	var pending []byte
	consumed, fed := 0, 0
	for {
		data, n, err := d.Decode(pending)
		body.Write(data)
		consumed += n
		pending = append([]byte(nil), pending[n:]...)
		switch err {
		case nil:
		case io.EOF:
			var tr []string
			for _, f := range d.Trailers {
				tr = append(tr, string(f.Name)+": "+string(f.Value))
			}
			return body.String(), tr, consumed, nil
		case ErrIncomplete:
			if fed == len(in) {
				return body.String(), nil, consumed, err
			}
			next := min(len(in), fed+step)
			pending = append(pending, in[fed:next]...)
			fed = next
		default:
			return body.String(), nil, consumed, err
		}
	}
}

func TestChunked(t *testing.T) {
	for _, tt := range []struct {
		name, in string
		max      int64
		body     string
		trailers []string
		err      error
	}{
		{"simple", "5\r\nhello\r\n0\r\n\r\n", 0, "hello", nil, nil},
		{"two chunks", "5\r\nhello\r\n6\r\n world\r\n0\r\n\r\nNEXT", 0, "hello world", nil, nil},
		{"hex upper and lower", "A\r\n0123456789\r\na\r\n0123456789\r\n0\r\n\r\n", 0, strings.Repeat("0123456789", 2), nil, nil},
		{"leading zeros", "0005\r\nhello\r\n000\r\n\r\n", 0, "hello", nil, nil},
		{"extensions", "5;a;b=c ; d = \"e\\\"f\" ;g=h\r\nhello\r\n0;last\r\n\r\n", 0, "hello", nil, nil},
		{"trailers", "5\r\nhello\r\n0\r\nX-Sum: abc \r\nX-B:\r\n\r\n", 0, "hello", []string{"X-Sum: abc", "X-B: "}, nil},
		{"at the body limit", "5\r\nhello\r\n0\r\n\r\n", 5, "hello", nil, nil},

		{"beyond the body limit", "5\r\nhello\r\n1\r\n!\r\n0\r\n\r\n", 5, "hello", nil, ErrBodyTooLarge},
		{"empty size", "\r\nhello\r\n0\r\n\r\n", 0, "", nil, ErrBadChunkSize},
		{"non-hex", "g\r\n", 0, "", nil, ErrBadChunkSize},
		{"0x prefix", "0x5\r\nhello\r\n0\r\n\r\n", 0, "", nil, ErrBadChunkSize},
		{"sign", "+5\r\nhello\r\n0\r\n\r\n", 0, "", nil, ErrBadChunkSize},
		{"negative", "-1\r\n", 0, "", nil, ErrBadChunkSize},
		{"leading space", " 5\r\nhello\r\n0\r\n\r\n", 0, "", nil, ErrBadChunkSize},
		{"trailing space", "5 \r\nhello\r\n0\r\n\r\n", 0, "", nil, ErrBadChunkExtension},
		{"17 digits", "00000000000000005\r\nhello\r\n0\r\n\r\n", 0, "", nil, ErrBadChunkSize},
		{"beyond int64", "8000000000000000\r\n", 0, "", nil, ErrBadChunkSize},
		{"bare LF after size", "5\nhello\r\n0\r\n\r\n", 0, "", nil, ErrBareLF},
		{"bare CR in size line", "5\r;a\r\nhello\r\n0\r\n\r\n", 0, "", nil, ErrBareCR},
		{"bare LF after data", "5\r\nhello\n0\r\n\r\n", 0, "hello", nil, ErrBadChunkData},
		{"data too long", "5\r\nhello!\r\n0\r\n\r\n", 0, "hello", nil, ErrBadChunkData},
		{"empty extension", "5;\r\nhello\r\n0\r\n\r\n", 0, "", nil, ErrBadChunkExtension},
		{"extension without semicolon", "5 a\r\nhello\r\n0\r\n\r\n", 0, "", nil, ErrBadChunkExtension},
		{"extension empty value", "5;a=\r\nhello\r\n0\r\n\r\n", 0, "", nil, ErrBadChunkExtension},
		{"extension bad value", "5;a=b@c\r\nhello\r\n0\r\n\r\n", 0, "", nil, ErrBadChunkExtension},
		{"extension open quote", "5;a=\"b\r\nhello\r\n0\r\n\r\n", 0, "", nil, ErrBadChunkExtension},
		{"extension NUL in quote", "5;a=\"\x00\"\r\nhello\r\n0\r\n\r\n", 0, "", nil, ErrBadChunkExtension},
		{"extension trailing space", "5;a \r\nhello\r\n0\r\n\r\n", 0, "", nil, ErrBadChunkExtension},
		{"line too long", "5;a=\"" + strings.Repeat("x", 5000) + "\"\r\nhello\r\n0\r\n\r\n", 0, "", nil, ErrChunkLineTooLong},
		{"trailer obs-fold", "0\r\nX: a\r\n b\r\n\r\n", 0, "", nil, ErrObsFold},
		{"trailer space before colon", "0\r\nX : a\r\n\r\n", 0, "", nil, ErrSpaceBeforeColon},
		{"trailer NUL", "0\r\nX: \x00\r\n\r\n", 0, "", nil, ErrBadFieldValue},
		{"trailer bare LF", "0\r\nX: a\n\r\n", 0, "", nil, ErrBareLF},
		{"end bare LF", "0\r\n\n", 0, "", nil, ErrBareLF},
		{"trailer too large", "0\r\nX: " + strings.Repeat("x", DefaultMaxTrailerBytes) + "\r\n\r\n", 0, "", nil, ErrHeaderTooLarge},
		{"incomplete", "5\r\nhel", 0, "hel", nil, ErrIncomplete},
		{"incomplete trailer", "0\r\nX: a\r\n", 0, "", nil, ErrIncomplete},
	} {
		t.Run(tt.name, func(t *testing.T) {
			steps := []int{0, 1, 3}
			if len(tt.in) > 1000 {
				steps = []int{0, 999}
			}
			for _, step := range steps {
				d := ChunkedDecoder{MaxBodyBytes: tt.max}
				body, tr, n, err := decodeAll(&d, tt.in, step)
				if err != tt.err || body != tt.body {
					t.Fatalf("step %d: body %q, err %v; want %q, %v", step, body, err, tt.body, tt.err)
				}
				if err == nil {
					if diff := cmp.Diff(tt.trailers, tr); diff != "" {
						t.Errorf("step %d: trailers (-want +got):\n%s", step, diff)
					}
					if want := strings.Index(tt.in, "\r\n\r\n") + 4; n != want {
						t.Errorf("step %d: consumed %d, want %d", step, n, want)
					}
				}
			}
		})
	}
}

func TestChunkedReset(t *testing.T) {
	var d ChunkedDecoder
	if _, _, _, err := decodeAll(&d, "0\r\nA: b\r\n\r\n", 0); err != nil {
		t.Fatal(err)
	}
	d.Reset()
	body, tr, _, err := decodeAll(&d, "2\r\nhi\r\n0\r\n\r\n", 0)
	if err != nil || body != "hi" || len(tr) != 0 {
		t.Fatalf("after Reset: %q %q %v", body, tr, err)
	}
	if _, _, err := d.Decode([]byte("x")); err != io.EOF {
		t.Fatalf("Decode after the end: %v, want io.EOF", err)
	}
}
