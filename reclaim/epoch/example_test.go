package epoch_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/gracepoll/gracepoll/reclaim/epoch"
)

// A waiter goroutine goes offline around its blocking call and validates
// what the call returned once back online; a deleter marks a slot released
// and retires the slot's cleanup, which runs once the waiter cannot hold it.
func Example() {
	r, err := epoch.New(1, epoch.Options{}) // one waiter, participant 0
	if err != nil {
		panic(err)
	}
	defer r.Close()

	var slot atomic.Bool // true while the slot is active
	slot.Store(true)
	events := make(chan struct{}) // stands in for epoll_wait
	handled := make(chan string)

	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			r.Offline(0) // about to block
			_, ok := <-events
			if !ok {
				return // offline: holds nothing
			}
			r.Online(0)
			if slot.Load() { // validate after Online, before use
				handled <- "event handled"
			} else {
				handled <- "stale event dropped"
			}
			r.Quiesce(0) // done with this batch of events
		}
	})

	events <- struct{}{}
	fmt.Println(<-handled)

	// Delete: mark the slot released, then retire its recycling, which
	// waits for a grace period and never runs inside Retire.
	slot.Store(false)
	var recycled atomic.Bool
	if err := r.Retire(func() { recycled.Store(true) }); err != nil {
		panic(err)
	}

	events <- struct{}{}
	fmt.Println(<-handled)

	if err := r.Barrier(context.Background()); err != nil {
		panic(err)
	}
	close(events)
	wg.Wait()
	fmt.Println("recycled:", recycled.Load(), "released:", r.Stats().Released)
	// Output:
	// event handled
	// stale event dropped
	// recycled: true released: 1
}
