package hpack

import (
	"bytes"
	"testing"
)

// fieldsFromBytes splits data at zero bytes into alternating names and
// values; a name with an odd first byte makes its field Sensitive.
func fieldsFromBytes(data []byte) []Field {
	parts := bytes.Split(data, []byte{0})
	var fields []Field
	for i := 0; i+1 < len(parts); i += 2 {
		name, value := parts[i], parts[i+1]
		fields = append(fields, Field{
			Name:      string(name),
			Value:     string(value),
			Sensitive: len(name) > 0 && name[0]&1 == 1,
		})
	}
	return fields
}

// FuzzRoundTrip checks that arbitrary fields, encoded in two blocks with
// a table size change between them, decode to the same fields and leave
// both dynamic tables equal.
func FuzzRoundTrip(f *testing.F) {
	f.Add([]byte(":method\x00GET\x00:path\x00/\x00x-custom\x00value"), uint16(4096))
	f.Add([]byte("cookie\x00a=b\x00authorization\x00secret"), uint16(0))
	f.Add([]byte("set-cookie\x00foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600\x00\x00\x00\xff\xfe\x00\x80"), uint16(100))
	f.Add([]byte(""), uint16(64))
	f.Fuzz(func(t *testing.T, data []byte, size uint16) {
		fields := fieldsFromBytes(data)
		e := NewEncoder()
		d := NewDecoder(DefaultDynamicTableSize, 1<<30)
		for round := range 2 {
			var block []byte
			for _, fl := range fields {
				block = e.AppendField(block, fl)
			}
			got, err := decodeAll(d, block)
			if err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
			if !equalFields(got, fields) {
				t.Fatalf("round %d: decoded %+v, want %+v", round, got, fields)
			}
			if !equalFields(tableFields(&e.table), tableFields(&d.table)) || e.table.size != d.table.size {
				t.Fatalf("round %d: tables differ", round)
			}
			e.SetMaxDynamicTableSize(uint32(size) % (DefaultDynamicTableSize + 1))
		}
	})
}

// FuzzDecode checks that arbitrary blocks never panic, that errors
// leave the decoder usable without panics too, and that a successful
// decode respects the list size limit.
func FuzzDecode(f *testing.F) {
	for _, steps := range [][]rfcStep{c3, c4, c5, c6} {
		for _, s := range steps {
			f.Add(dehex(f, s.block))
		}
	}
	f.Add(dehex(f, "3fe11f 82"))
	f.Add(dehex(f, "20 82 20"))
	f.Add(dehex(f, "ff ff ff ff ff ff 0f"))
	f.Add(bombBlock(20))
	f.Fuzz(func(t *testing.T, block []byte) {
		const limit = 8 << 10
		d := NewDecoder(DefaultDynamicTableSize, limit)
		for range 2 {
			var total uint64
			err := d.Decode(block, func(f Field) error {
				total += uint64(f.Size())
				return nil
			})
			if err == nil && total > limit {
				t.Fatalf("decoded %d bytes, limit %d", total, limit)
			}
			if d.table.size > d.table.maxSize || d.table.maxSize > DefaultDynamicTableSize {
				t.Fatalf("table size %d, max %d", d.table.size, d.table.maxSize)
			}
		}
	})
}
