package poller

import (
	"sync"
	"sync/atomic"
)

// A waiter's batch is the events one epoll_wait returned. The waiter claims
// them one at a time through a cursor, so that a waiter blocked in one
// handler does not hold the rest: on a shared set the monitor takes the
// events it has not reached and hands them to other waiters (see
// monitor.go). A handed-off event is a raw epoll_event, a handle and event
// bits: the waiter that takes it validates it against the slot word after
// its own epoll_wait returned, exactly like a fresh event, so the hand-off
// queue holds no reference the reclaimer must wait for.
//
// Indexes are absolute: next only grows, across batches, so the monitor
// can read "the same value twice, Overrun apart" as "the same event all
// along". The batch is events base..end-1, stored in evs[0:end-base].
//
//	the waiter claims event i := next.Add(1)-1, and stops at i >= end
//	the monitor takes events j..end-1 with a CAS of next from j to
//	    end|detachBit, where base < j <= end: the waiter is inside the
//	    dispatch of event j-1, stuck there
//
// Each index goes to whichever gets to it first, so no event is run twice
// or lost. The same CAS detaches the waiter: the monitor now acts for it
// in the reclaimer (takes it offline) until the waiter's next claim finds
// detachBit and brings it back online (Poller.reattach). Only a waiter
// inside a dispatch can be detached, never one between batches, and the
// waiter and the monitor never make reclaimer calls for it at once. On a shared set, where the monitor watches, mu orders the rest:
// the waiter holds it to start and end a batch and to append handed-off
// events, the monitor while it copies events out, so that epoll_wait never
// overwrites events being copied.
type batch struct {
	mu   sync.Mutex
	evs  []epollEvent // epoll_wait fills evs[:MaxEvents]; hand-offs may add as many again
	base int64        // index of evs[0]; written by the waiter, under mu
	end  int64        // one past the last event; written by the waiter, under mu
	next atomic.Int64 // the next index to claim
	// watched: a monitor may take events (a shared set); without one
	// nobody else touches the batch and mu is never taken.
	watched bool
}

func (b *batch) init(maxEvents int, watched bool) {
	b.watched = watched
	n := maxEvents
	if watched {
		n *= 2
	}
	b.evs = make([]epollEvent, n)
}

// start begins a batch of the n events epoll_wait wrote into evs[:n].
func (b *batch) start(n int) {
	if b.watched {
		b.mu.Lock()
		defer b.mu.Unlock()
	}
	b.base = b.next.Load()
	b.end = b.base + int64(n)
}

// claim returns the batch's next event, or nil at its end. Only the
// waiter calls it.
func (b *batch) claim() *epollEvent {
	i := b.next.Add(1) - 1
	if i >= b.end {
		return nil
	}
	return &b.evs[i-b.base]
}

// finish ends the batch, waiting for a copy the monitor may be making, so
// that evs can be reused.
func (b *batch) finish() {
	if b.watched {
		b.mu.Lock()
		defer b.mu.Unlock()
	}
	b.base = b.next.Load()
	b.end = b.base
}

// spare returns the room after the batch's last event. Only the waiter
// writes there, and the monitor never reads past end.
func (b *batch) spare() []epollEvent { return b.evs[b.end-b.base:] }

// extend makes the k events written to spare part of the batch. Only the
// waiter calls it, while it runs the batch.
func (b *batch) extend(k int) {
	b.mu.Lock()
	b.end += int64(k)
	b.mu.Unlock()
}

// detachBit marks the cursor of a detached waiter. Far above any index a
// batch reaches, it makes every claim fail until the waiter clears it.
const detachBit = int64(1) << 62

// detach moves the events the waiter has not claimed to q and detaches
// the waiter, if it is inside the dispatch of one of the batch's events.
// It reports how many events it moved and whether it detached the waiter.
// The monitor calls it.
func (b *batch) detach(q *handoff) (moved int, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for {
		j := b.next.Load()
		if j <= b.base || j > b.end {
			// Between batches, before its first claim, after its last,
			// or detached already.
			return 0, false
		}
		if b.next.CompareAndSwap(j, b.end|detachBit) {
			return q.put(b.evs[j-b.base : b.end-b.base]), true
		}
	}
}

// detached reports, after claim returned nil, whether the monitor detached
// the waiter. Only the waiter calls it.
func (b *batch) detached() bool { return b.next.Load()&detachBit != 0 }

// reattach clears detachBit, undoing the claim that found it, so the next
// claim goes on from the batch's end as it was then: any events appended
// since (extend) are still the waiter's. Only the waiter calls it, once
// the monitor is done acting for it.
func (b *batch) reattach() { b.next.Store((b.next.Load() - 1) &^ detachBit) }

// handoff is the queue of events taken from blocked waiters' batches, and
// the eventfd on the shared set that says it is not empty.
type handoff struct {
	mu  sync.Mutex
	efd int // -1 if the poller has no shared set
	q   []epollEvent
	n   atomic.Int64 // len(q), for a look without the lock
}

// put queues evs, except the wake-ups, which need no waiter, and signals
// the eventfd. It returns how many it queued.
func (q *handoff) put(evs []epollEvent) int {
	q.mu.Lock()
	k := len(q.q)
	for _, e := range evs {
		if h, _ := eventOf(&e); h != wakeHandle && h != handoffHandle {
			q.q = append(q.q, e)
		}
	}
	k = len(q.q) - k
	q.n.Store(int64(len(q.q)))
	q.mu.Unlock()
	if k > 0 {
		signal(q.efd)
	}
	return k
}

// take moves queued events to waiter batch b, as many as fit, and returns
// them. The eventfd
// is reset before the queue is read, so an event queued after that read
// signals it again and another waiter comes; events that do not fit
// signal it again too. It never holds b.mu and q.mu together, which
// takeRest takes in the other order.
func (q *handoff) take(b *batch) []epollEvent {
	drain(q.efd)
	q.mu.Lock()
	to := b.spare()
	k := copy(to, q.q)
	rest := copy(q.q, q.q[k:])
	clear(q.q[rest:])
	q.q = q.q[:rest]
	q.n.Store(int64(rest))
	q.mu.Unlock()
	if rest > 0 {
		signal(q.efd)
	}
	b.extend(k)
	return to[:k]
}
