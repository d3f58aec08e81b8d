package conn

import (
	"testing"
	"unsafe"
)

// TestConnSize keeps a connection small: every idle connection costs this
// much Go heap on top of its poller slot. A field added here should have
// a reason to be paid for by every connection; what few need goes in
// connExt.
func TestConnSize(t *testing.T) {
	if unsafe.Sizeof(uintptr(0)) != 8 {
		t.Skip("sizes are budgeted for 64-bit systems")
	}
	if n := unsafe.Sizeof(Conn{}); n > 176 {
		t.Errorf("Conn is %d bytes, budget 176 (a 176-byte size class)", n)
	}
}
