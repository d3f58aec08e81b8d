package hpack

import (
	"errors"
	"runtime"
	"strings"
	"testing"
)

func TestDecodeHostile(t *testing.T) {
	cases := []struct {
		name  string
		block string
		want  error
	}{
		{"index 0", "80", ErrIndex},
		{"index beyond the static table, dynamic empty", "be", ErrIndex},
		{"huge index", "ff ff ff ff 0f", ErrIndex},
		{"literal name index beyond the tables", "7f 00 01 61", ErrIndex},
		{"literal name index 0 is a new name, not an error", "", nil},
		{"integer with too many continuation bytes", "ff 80 80 80 80 80 80 01", ErrInteger},
		{"integer above 32 bits", "ff ff ff ff ff 7f", ErrInteger},
		{"integer truncated", "ff 80", ErrTruncated},
		{"literal without its name", "40", ErrTruncated},
		{"string length beyond the block", "00 05 61 62", ErrTruncated},
		{"value length beyond the block", "00 01 61 7f 10", ErrTruncated},
		{"huge string length", "00 7f ff ff ff ff 07", ErrTruncated},
		{"invalid Huffman in a value", "00 01 61 81 00", ErrHuffman},
		{"size update above the limit", "3f e2 1f", ErrTableSize}, // 4097
		{"size update after a field", "82 20", ErrTableSize},
		{"size update between fields", "82 3f e1 1f 82", ErrTableSize},
	}
	for _, c := range cases {
		d := NewDecoder(4096, 0)
		_, err := decodeAll(d, dehex(t, c.block))
		if c.want == nil {
			if err != nil {
				t.Errorf("%s: %v", c.name, err)
			}
			continue
		}
		if !errors.Is(err, c.want) {
			t.Errorf("%s: err %v, want %v", c.name, err, c.want)
		}
		// The table is out of step: every later block fails too.
		if _, err := decodeAll(d, dehex(t, "82")); !errors.Is(err, c.want) {
			t.Errorf("%s: next block: err %v, want %v", c.name, err, c.want)
		}
	}
}

func TestDecodeSizeUpdate(t *testing.T) {
	d := NewDecoder(4096, 0)
	ck := "400a 6375 7374 6f6d 2d6b 6579 0d63 7573 746f 6d2d 6865 6164 6572"
	if _, err := decodeAll(d, dehex(t, ck)); err != nil {
		t.Fatal(err)
	}
	// Two updates at the start (RFC 7541 4.2): to 0, emptying the
	// table, then back to 4096.
	if _, err := decodeAll(d, dehex(t, "20 3f e1 1f 82")); err != nil {
		t.Fatal(err)
	}
	if d.table.len() != 0 || d.table.maxSize != 4096 {
		t.Fatalf("after updates: %d entries, max %d", d.table.len(), d.table.maxSize)
	}

	// A lowered limit requires an update in the next block.
	d.SetMaxDynamicTableSize(100)
	if _, err := decodeAll(d, dehex(t, "82")); !errors.Is(err, ErrTableSize) {
		t.Fatalf("block without the required update: %v", err)
	}
	d = NewDecoder(4096, 0)
	d.SetMaxDynamicTableSize(100)
	if _, err := decodeAll(d, dehex(t, "3f 45 82")); err != nil { // 100
		t.Fatalf("required update: %v", err)
	}
	if _, err := decodeAll(d, dehex(t, "3f 46")); !errors.Is(err, ErrTableSize) { // 101
		t.Fatalf("update above the lowered limit: %v", err)
	}
}

func TestDecodeEmitError(t *testing.T) {
	stop := errors.New("stop")
	d := NewDecoder(4096, 0)
	n := 0
	err := d.Decode(dehex(t, "82 84 86"), func(Field) error {
		n++
		return stop
	})
	if err != stop || n != 1 {
		t.Fatalf("err %v after %d fields", err, n)
	}
}

func TestDecodeListLimit(t *testing.T) {
	// :method GET (42) + :path / (38) = 80.
	d := NewDecoder(4096, 80)
	if _, err := decodeAll(d, dehex(t, "82 84")); err != nil {
		t.Fatal(err)
	}
	if _, err := decodeAll(d, dehex(t, "82 84 86")); !errors.Is(err, ErrListTooLarge) {
		t.Fatalf("err %v, want ErrListTooLarge", err)
	}
	// A literal whose strings exceed the limit fails on its length,
	// before its bytes are copied.
	d = NewDecoder(4096, 40)
	if _, err := decodeAll(d, dehex(t, "00 01 61 08 3132333435363738")); !errors.Is(err, ErrListTooLarge) {
		t.Fatalf("err %v, want ErrListTooLarge", err)
	}
}

// bombBlock returns a block that adds one entry of 4 KiB less its
// overhead to the dynamic table and then references it refs times:
// about 4 MiB decoded from about 5 KiB.
func bombBlock(refs int) []byte {
	e := NewEncoder()
	e.noHuffman = true
	value := strings.Repeat("x", DefaultDynamicTableSize-entryOverhead-len("bomb"))
	f := Field{Name: "bomb", Value: value}
	var block []byte
	for range refs + 1 {
		block = e.AppendField(block, f)
	}
	return block
}

func TestDecodeBomb(t *testing.T) {
	block := bombBlock(1000)
	if len(block) > 6000 {
		t.Fatalf("block of %d bytes", len(block))
	}
	const limit = 64 << 10
	decoded := 0
	run := func() error {
		d := NewDecoder(4096, limit)
		decoded = 0
		return d.Decode(block, func(f Field) error {
			// What a server would keep: the strings are shared with
			// the table, so keeping them costs nothing more.
			decoded += len(f.Name) + len(f.Value)
			return nil
		})
	}
	if err := run(); !errors.Is(err, ErrListTooLarge) {
		t.Fatalf("err %v, want ErrListTooLarge", err)
	}
	if decoded > limit {
		t.Fatalf("emitted %d bytes before failing, limit %d", decoded, limit)
	}
	// The whole block was decoded: the Decoder is still in step.
	d := NewDecoder(4096, limit)
	_ = d.Decode(block, func(Field) error { return nil })
	if got, err := decodeAll(d, []byte{0xbe}); err != nil || len(got) != 1 || got[0].Name != "bomb" {
		t.Fatalf("after the bomb: %v", err)
	}

	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	const runs = 10
	for range runs {
		_ = run()
	}
	runtime.ReadMemStats(&after)
	perRun := (after.TotalAlloc - before.TotalAlloc) / runs
	// Decoded in full the block would be 1001 * 4064 bytes, about 4 MiB;
	// the decoder should allocate the one entry and its buffers.
	if perRun > 32<<10 {
		t.Fatalf("allocated %d bytes per decode", perRun)
	}
	t.Logf("bomb: %d-byte block, %d bytes allocated per decode", len(block), perRun)
}

func TestDecodeIndexedNoAlloc(t *testing.T) {
	d := NewDecoder(4096, 0)
	if _, err := decodeAll(d, dehex(t, c3[0].block)); err != nil {
		t.Fatal(err)
	}
	block := dehex(t, "8286 84be")
	emit := func(Field) error { return nil }
	allocs := testing.AllocsPerRun(100, func() {
		if err := d.Decode(block, emit); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations decoding indexed fields", allocs)
	}
}

func TestDynamicTableEviction(t *testing.T) {
	var tb dynamicTable
	tb.setMaxSize(60)
	tb.add(Field{Name: "a", Value: "b"}) // 34
	tb.add(Field{Name: "cc", Value: "dd"})
	if tb.len() != 1 || tb.size != 36 || tb.at(1).Name != "cc" {
		t.Fatalf("after eviction: %d entries, size %d", tb.len(), tb.size)
	}
	// A field larger than the table empties it (RFC 7541 4.4).
	tb.add(Field{Name: strings.Repeat("n", 20), Value: strings.Repeat("v", 20)})
	if tb.len() != 0 || tb.size != 0 {
		t.Fatalf("after an oversized field: %d entries, size %d", tb.len(), tb.size)
	}
	// Many insertions keep the backing slice bounded.
	tb.setMaxSize(4096)
	for i := range 10000 {
		tb.add(Field{Name: "k", Value: strings.Repeat("v", i%50)})
	}
	if cap(tb.entries) > 4*4096/32 {
		t.Fatalf("backing slice grew to %d", cap(tb.entries))
	}
}

// TestDecodeStopKeepsTable checks that after the list limit or an emit
// error the rest of the block still updates the dynamic table, so the
// next block, which refers to it, decodes.
func TestDecodeStopKeepsTable(t *testing.T) {
	ab := Field{Name: "a", Value: "b"}
	// :method GET (42) + :path / (38) = 80, then a: b inserted.
	d := NewDecoder(4096, 80)
	var got []Field
	err := d.Decode(dehex(t, "82 84 86 40 01 61 01 62"), func(f Field) error {
		got = append(got, f)
		return nil
	})
	if !errors.Is(err, ErrListTooLarge) || len(got) != 2 {
		t.Fatalf("err %v after %d fields", err, len(got))
	}
	roundTrip(t, d, dehex(t, "be"), []Field{ab})

	stop := errors.New("stop")
	d = NewDecoder(4096, 0)
	err = d.Decode(dehex(t, "82 40 01 61 01 62"), func(Field) error { return stop })
	if err != stop {
		t.Fatalf("err %v", err)
	}
	roundTrip(t, d, dehex(t, "be"), []Field{ab})

	// A literal larger than the table, past the limit, still empties the
	// table (RFC 7541 4.4).
	d = NewDecoder(64, 40)
	roundTrip(t, d, dehex(t, "40 01 61 01 62"), []Field{ab})
	big := append(dehex(t, "82 40 01 61 20"), strings.Repeat("v", 32)...)
	if _, err := decodeAll(d, big); !errors.Is(err, ErrListTooLarge) {
		t.Fatalf("err %v", err)
	}
	if d.table.len() != 0 {
		t.Fatalf("%d entries left", d.table.len())
	}
}
