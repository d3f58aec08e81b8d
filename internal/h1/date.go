package h1

import (
	"net/http"
	"sync/atomic"
	"time"
)

// A DateClock formats the Date field (RFC 9110 section 6.6.1) once a
// second, not once per response. Its zero value is ready to use, and it is
// safe for concurrent use.
type DateClock struct {
	sec  atomic.Int64
	date atomic.Pointer[string]
}

// Append appends the current time in the HTTP date format.
func (k *DateClock) Append(b []byte) []byte {
	return append(b, k.String()...)
}

// String returns the current time in the HTTP date format.
func (k *DateClock) String() string {
	now := time.Now()
	if s := now.Unix(); k.sec.Load() != s {
		d := now.UTC().Format(http.TimeFormat)
		k.date.Store(&d) // before sec: whoever sees the second sees a date
		k.sec.Store(s)
	}
	return *k.date.Load()
}
