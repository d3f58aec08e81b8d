//go:build gracepoll_mutation

package conn

// Deliberate bugs for the mutation tests (mutation_test.go), which prove
// that the connection-level fd-reuse test catches each one. Production code
// calls the test hooks in one line each; a normal build (mutation_off.go)
// makes them identities the compiler inlines away, and only this build,
// with the tag gracepoll_mutation, used by tests alone, can switch a bug on.

import "sync"

const (
	mutNone = iota
	// mutEarlyClose: the layer closes the fd as soon as the connection
	// starts closing (Close, the peer's FIN) or ends (Abort, an error), and
	// the poller no longer closes it after the grace period
	// (testHookEarlyClose, testHookCloseFD).
	mutEarlyClose
	// mutNoOpenCheck: a write does not check that the connection is still
	// open (testHookWritable).
	mutNoOpenCheck
)

// mutation is set by tests before NewServer.
var mutation = mutNone

// testHookWritable replaces Conn.write's check that the connection is
// still open.
func testHookWritable(err error) error {
	if mutation == mutNoOpenCheck {
		return nil
	}
	return err
}

// earlyClosed remembers the connections whose fd the mutant closed, so it
// closes each once.
var earlyClosed sync.Map // *Conn -> struct{}

// testHookEarlyClose closes c's fd at once, without a grace period.
func testHookEarlyClose(c *Conn) {
	if mutation != mutEarlyClose {
		return
	}
	if _, done := earlyClosed.LoadOrStore(c, struct{}{}); !done {
		closeFD(c.fd)
	}
}

// testHookCloseFD says whether the poller closes a connection's fd after
// its grace period: not in the early-close mutant, whose layer did.
func testHookCloseFD(poller bool) bool {
	return poller && mutation != mutEarlyClose
}
