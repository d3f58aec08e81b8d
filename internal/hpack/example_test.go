package hpack_test

import (
	"errors"
	"fmt"

	"github.com/gracepoll/gracepoll/internal/hpack"
)

func Example() {
	// One Encoder per connection for what it sends, one Decoder for
	// what it receives.
	enc := hpack.NewEncoder()
	dec := hpack.NewDecoder(hpack.DefaultDynamicTableSize, 64<<10)

	var block []byte
	for _, f := range []hpack.Field{
		{Name: ":method", Value: "GET"},
		{Name: ":path", Value: "/"},
		{Name: "cookie", Value: "session=1", Sensitive: true},
	} {
		block = enc.AppendField(block, f)
	}

	err := dec.Decode(block, func(f hpack.Field) error {
		fmt.Printf("%s: %s (sensitive %v)\n", f.Name, f.Value, f.Sensitive)
		return nil
	})
	if errors.Is(err, hpack.ErrListTooLarge) {
		// Too large a header list: for HTTP/2, like any decoding
		// error, a connection error of type COMPRESSION_ERROR.
		return
	}
	fmt.Println(err)
	// Output:
	// :method: GET (sensitive false)
	// :path: / (sensitive false)
	// cookie: session=1 (sensitive true)
	// <nil>
}
