package hpack

import (
	"bytes"
	"strings"
	"testing"
)

func TestEncoderSizeUpdate(t *testing.T) {
	e := NewEncoder()
	e.noHuffman = true
	ck := Field{Name: "custom-key", Value: "custom-header"}
	e.AppendField(nil, ck)

	// Shrunk to 0 and grown to 100 between blocks: the peer must see
	// both, 0 evicting everything (RFC 7541 4.2).
	e.SetMaxDynamicTableSize(0)
	e.SetMaxDynamicTableSize(100)
	got := e.AppendField(nil, reqGET)
	if want := dehex(t, "20 3f45 82"); !bytes.Equal(got, want) {
		t.Fatalf("got %x, want %x", got, want)
	}
	if e.table.len() != 0 || e.MaxDynamicTableSize() != 100 {
		t.Fatalf("table: %d entries, max %d", e.table.len(), e.MaxDynamicTableSize())
	}
	// Only once, at the start of the block.
	if got := e.AppendField(nil, reqGET); !bytes.Equal(got, []byte{0x82}) {
		t.Fatalf("second field: %x", got)
	}
	// Grown only: one update.
	e.SetMaxDynamicTableSize(4096)
	if got, want := e.AppendField(nil, reqGET), dehex(t, "3fe11f 82"); !bytes.Equal(got, want) {
		t.Fatalf("got %x, want %x", got, want)
	}

	// The decoder follows.
	e = NewEncoder()
	d := NewDecoder(4096, 0)
	var block []byte
	block = e.AppendField(block, ck)
	roundTrip(t, d, block, []Field{ck})
	e.SetMaxDynamicTableSize(0)
	d.SetMaxDynamicTableSize(0)
	roundTrip(t, d, e.AppendField(nil, ck), []Field{ck})
	if d.table.len() != 0 || d.table.maxSize != 0 {
		t.Fatalf("decoder table: %d entries, max %d", d.table.len(), d.table.maxSize)
	}
}

func roundTrip(t *testing.T, d *Decoder, block []byte, want []Field) {
	t.Helper()
	got, err := decodeAll(d, block)
	if err != nil {
		t.Fatal(err)
	}
	if !equalFields(got, want) {
		t.Fatalf("decoded %+v, want %+v", got, want)
	}
}

func TestEncoderChoices(t *testing.T) {
	e := NewEncoder()
	d := NewDecoder(4096, 0)

	// A static entry without a value matches an empty value.
	if got := e.AppendField(nil, Field{Name: ":authority"}); !bytes.Equal(got, []byte{0x81}) {
		t.Fatalf(":authority with no value: %x", got)
	}

	// A field larger than the table goes without indexing.
	big := Field{Name: "x-big", Value: strings.Repeat("v", 5000)}
	block := e.AppendField(nil, big)
	if block[0]&0xf0 != 0x00 || e.table.len() != 0 {
		t.Fatalf("oversized field: first byte %#x, %d entries", block[0], e.table.len())
	}
	roundTrip(t, d, block, []Field{big})

	// A sensitive field is a never-indexed literal even when the table
	// has it, named by index, and decodes as Sensitive.
	auth := Field{Name: "authorization", Value: "secret"}
	roundTrip(t, d, e.AppendField(nil, auth), []Field{auth})
	sens := auth
	sens.Sensitive = true
	block = e.AppendField(nil, sens)
	if want := []byte{0x1f, 23 - 15}; !bytes.Equal(block[:2], want) { // static name 23
		t.Fatalf("sensitive field: %x", block)
	}
	roundTrip(t, d, block, []Field{sens})

	custom := Field{Name: "x-a", Value: "b"}
	roundTrip(t, d, e.AppendField(nil, custom), []Field{custom})
	sensCustom := custom
	sensCustom.Sensitive = true
	block = e.AppendField(nil, sensCustom)
	if want := []byte{0x1f, 62 - 15}; !bytes.Equal(block[:2], want) { // dynamic name 62
		t.Fatalf("sensitive field with a dynamic name: %x", block)
	}
	roundTrip(t, d, block, []Field{sensCustom})
	if e.table.len() != 2 || !equalFields(tableFields(&e.table), tableFields(&d.table)) {
		t.Fatalf("tables: encoder %+v, decoder %+v", tableFields(&e.table), tableFields(&d.table))
	}
}

// TestEncodeDecodeSequence runs many blocks through a small table, so
// entries are evicted and referenced across blocks, checking that the
// tables stay in step.
func TestEncodeDecodeSequence(t *testing.T) {
	e := NewEncoder()
	d := NewDecoder(4096, 0)
	e.SetMaxDynamicTableSize(300)
	for i := range 200 {
		fields := []Field{
			reqGET, {Name: ":path", Value: "/item/" + strings.Repeat("z", i%7)},
			{Name: "x-seq", Value: string(rune('a' + i%26))},
			{Name: "cookie", Value: "id=" + strings.Repeat("c", i%3), Sensitive: i%2 == 0},
		}
		var block []byte
		for _, f := range fields {
			block = e.AppendField(block, f)
		}
		roundTrip(t, d, block, fields)
		if !equalFields(tableFields(&e.table), tableFields(&d.table)) {
			t.Fatalf("block %d: tables differ", i)
		}
	}
}
