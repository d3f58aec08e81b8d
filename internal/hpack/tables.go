package hpack

// staticTable is the static table of RFC 7541 Appendix A; index i of
// the format is staticTable[i-1].
var staticTable = [...]Field{
	{Name: ":authority"},
	{Name: ":method", Value: "GET"},
	{Name: ":method", Value: "POST"},
	{Name: ":path", Value: "/"},
	{Name: ":path", Value: "/index.html"},
	{Name: ":scheme", Value: "http"},
	{Name: ":scheme", Value: "https"},
	{Name: ":status", Value: "200"},
	{Name: ":status", Value: "204"},
	{Name: ":status", Value: "206"},
	{Name: ":status", Value: "304"},
	{Name: ":status", Value: "400"},
	{Name: ":status", Value: "404"},
	{Name: ":status", Value: "500"},
	{Name: "accept-charset"},
	{Name: "accept-encoding", Value: "gzip, deflate"},
	{Name: "accept-language"},
	{Name: "accept-ranges"},
	{Name: "accept"},
	{Name: "access-control-allow-origin"},
	{Name: "age"},
	{Name: "allow"},
	{Name: "authorization"},
	{Name: "cache-control"},
	{Name: "content-disposition"},
	{Name: "content-encoding"},
	{Name: "content-language"},
	{Name: "content-length"},
	{Name: "content-location"},
	{Name: "content-range"},
	{Name: "content-type"},
	{Name: "cookie"},
	{Name: "date"},
	{Name: "etag"},
	{Name: "expect"},
	{Name: "expires"},
	{Name: "from"},
	{Name: "host"},
	{Name: "if-match"},
	{Name: "if-modified-since"},
	{Name: "if-none-match"},
	{Name: "if-range"},
	{Name: "if-unmodified-since"},
	{Name: "last-modified"},
	{Name: "link"},
	{Name: "location"},
	{Name: "max-forwards"},
	{Name: "proxy-authenticate"},
	{Name: "proxy-authorization"},
	{Name: "range"},
	{Name: "referer"},
	{Name: "refresh"},
	{Name: "retry-after"},
	{Name: "server"},
	{Name: "set-cookie"},
	{Name: "strict-transport-security"},
	{Name: "transfer-encoding"},
	{Name: "user-agent"},
	{Name: "vary"},
	{Name: "via"},
	{Name: "www-authenticate"},
}

const staticLen = uint64(len(staticTable))

// staticByName gives, for the encoder, the lowest static index of each
// name. Entries sharing a name are adjacent (Appendix A), so the
// encoder finds a name-value pair by scanning on from there, without
// hashing the value.
var staticByName = map[string]uint64{}

func init() {
	for i, f := range staticTable {
		if _, ok := staticByName[f.Name]; !ok {
			staticByName[f.Name] = uint64(i + 1)
		}
	}
}

// staticSearch returns the static index of the entry equal to f's name
// and value, or of the first with its name, or 0.
func staticSearch(f Field) (idx uint64, exact bool) {
	first, ok := staticByName[f.Name]
	if !ok {
		return 0, false
	}
	for i := first; i <= staticLen && staticTable[i-1].Name == f.Name; i++ {
		if staticTable[i-1].Value == f.Value {
			return i, true
		}
	}
	return first, false
}

// dynamicTable is the dynamic table of RFC 7541 2.3.2: a FIFO of fields
// whose sizes add up to at most maxSize, the newest having the lowest
// index.
type dynamicTable struct {
	// entries holds the live fields from entries[head], the oldest, to
	// the last, the newest. Evicting advances head; the slice is
	// compacted when head passes half its length, so eviction costs
	// amortised constant time without a ring's index arithmetic.
	entries []Field
	head    int
	size    uint32 // sum of the live entries' Size
	maxSize uint32
}

// len returns the number of entries.
func (t *dynamicTable) len() int { return len(t.entries) - t.head }

// at returns the entry of dynamic index i, 1 being the newest; i must be
// in [1, t.len()].
func (t *dynamicTable) at(i int) Field { return t.entries[len(t.entries)-i] }

// setMaxSize changes the maximum size, evicting the oldest entries until
// the table fits (RFC 7541 4.3).
func (t *dynamicTable) setMaxSize(n uint32) {
	t.maxSize = n
	t.evict(0)
}

// evict removes the oldest entries until room more bytes fit.
func (t *dynamicTable) evict(room uint32) {
	for t.head < len(t.entries) && uint64(t.size)+uint64(room) > uint64(t.maxSize) {
		t.size -= t.entries[t.head].Size()
		t.entries[t.head] = Field{} // release the strings
		t.head++
	}
	if t.head == len(t.entries) {
		t.entries = t.entries[:0]
		t.head = 0
	} else if t.head > len(t.entries)/2 {
		n := copy(t.entries, t.entries[t.head:])
		clear(t.entries[n:])
		t.entries = t.entries[:n]
		t.head = 0
	}
}

// add inserts f as the newest entry, evicting to make room; a field
// larger than the whole table just empties it (RFC 7541 4.4).
func (t *dynamicTable) add(f Field) {
	s := f.Size()
	if s > t.maxSize {
		t.evict(t.maxSize + 1) // everything
		return
	}
	t.evict(s)
	f.Sensitive = false
	t.entries = append(t.entries, f)
	t.size += s
}

// search returns the dynamic index of the newest entry equal to f
// (exact), or else of the newest entry with f's name, or 0.
func (t *dynamicTable) search(f Field) (idx int, exact bool) {
	for i := 1; i <= t.len(); i++ {
		e := t.at(i)
		if e.Name != f.Name {
			continue
		}
		if e.Value == f.Value {
			return i, true
		}
		if idx == 0 {
			idx = i
		}
	}
	return idx, false
}
