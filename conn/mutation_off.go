//go:build !gracepoll_mutation

package conn

// The test hooks of a normal build: identities the compiler inlines away.
// mutation_on.go, built only for the mutation tests (build tag
// gracepoll_mutation), makes them bugs.

func testHookWritable(err error) error { return err }

func testHookEarlyClose(*Conn) {}

func testHookCloseFD(poller bool) bool { return poller }
