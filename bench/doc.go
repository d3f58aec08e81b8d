// Package bench holds gracepoll's benchmarks; it has no API. Run them with
//
//	go test -run '^$' -bench . ./bench/...
//
// Every figure a benchmark reports comes from `go test -bench` output, in
// the units it names (ns/op, allocs/op, and custom units such as p50-µs),
// and is meant to be compared as a ratio within one run on one machine.
package bench
