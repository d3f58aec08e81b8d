package poller

import "runtime"

// goid returns the calling goroutine's id, parsed from runtime.Stack. It
// costs about a microsecond and is used only to refuse calls that would
// wait for the calling callback itself (Close, Barrier), never per event.
func goid() int64 {
	var buf [64]byte
	b := buf[:runtime.Stack(buf[:], false)]
	// "goroutine 123 [running]:..."
	const prefix = "goroutine "
	if len(b) < len(prefix) {
		return -1
	}
	var id int64
	for _, c := range b[len(prefix):] {
		if c < '0' || c > '9' {
			break
		}
		id = id*10 + int64(c-'0')
	}
	return id
}
