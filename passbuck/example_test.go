package passbuck_test

import (
	"context"
	"fmt"

	"github.com/gracepoll/gracepoll/passbuck"
)

// Two participants, both blocked (offline): the release runs without
// either of them waking up, on the Reclaimer's own goroutine.
func Example() {
	r, err := passbuck.New(2, passbuck.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer r.Close()
	r.Offline(0)
	r.Offline(1)
	r.Retire(func() { fmt.Println("released") })
	if err := r.Barrier(context.Background()); err != nil {
		fmt.Println(err)
	}
	// Output: released
}

// In the classic mode every participant must pass a quiescent point, in
// index order; the last one runs the release.
func Example_classic() {
	r, _ := passbuck.New(2, passbuck.Options{Mode: passbuck.Classic})
	defer r.Close()
	r.Retire(func() { fmt.Println("released") })
	fmt.Println("quiesce 0")
	r.Quiesce(0)
	fmt.Println("quiesce 1")
	r.Quiesce(1)
	// Output:
	// quiesce 0
	// quiesce 1
	// released
}
