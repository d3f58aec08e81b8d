package httpd

import (
	"net/http"
	"sync/atomic"
	"time"
)

// dateClock formats the Date field (RFC 9110 section 6.6.1) once a
// second, not once per response.
type dateClock struct {
	sec  atomic.Int64
	date atomic.Pointer[[]byte]
}

// appendDate appends the current time in the HTTP date format.
func (k *dateClock) appendDate(b []byte) []byte {
	now := time.Now()
	if s := now.Unix(); k.sec.Load() != s {
		d := now.UTC().AppendFormat(make([]byte, 0, len(http.TimeFormat)), http.TimeFormat)
		k.date.Store(&d) // before sec: whoever sees the second sees a date
		k.sec.Store(s)
	}
	return append(b, *k.date.Load()...)
}
