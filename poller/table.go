package poller

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// The slot state word, one atomic uint64 per slot:
//
//	bits 63..32  generation; starts at 1, bumped when the slot is freed
//	bits 31..8   holds: Hold calls (and internal reads) not yet released
//	bit  4       waitHolds: the grace period is over; the last hold to go
//	             retires the release again
//	bit  3       pending: events arrived while a waiter ran OnEvent (Shared)
//	bit  2       running: a waiter is running OnEvent (Shared)
//	bits 1..0    lifecycle: free, active, released, freeing
//
// The lifecycle: Add makes a free slot active (registered in epoll and
// attached to its waiter). Delete, a hang-up, a panicking handler or Close
// makes it released: out of epoll, no more OnEvent, but its waiter and
// counters still readable. After the grace period and the last hold, the
// release makes it freeing (OnRelease runs, the owned fd is closed, the
// registration is detached from its waiter), then free with the next
// generation. "Registered" is the lifecycle; "attached" is a separate fact
// (slot.attached), dropped only after OnRelease.
//
// A waiter validates an event with ONE atomic operation on this word:
// generation and lifecycle are read together, so the slot cannot be released
// and reused between two reads. Delete wins the registration with a CAS from
// active to released; a stale handle fails it. The running bit orders the
// OnEvent calls of one registration (each run's final CAS happens before the
// next run's first CAS), which the race detector can see and the kernel's
// EPOLLONESHOT ordering it cannot.
const (
	stFree       uint64 = 0
	stActive     uint64 = 1
	stReleased   uint64 = 2
	stFreeing    uint64 = 3
	stMask       uint64 = 3
	bitRunning   uint64 = 1 << 2
	bitPending   uint64 = 1 << 3
	bitWaitHolds uint64 = 1 << 4
	holdOne      uint64 = 1 << 8
	holdMask     uint64 = (1<<24 - 1) << 8
)

func holdsOf(word uint64) uint64 { return (word & holdMask) >> 8 }

func genOf(word uint64) uint32 { return uint32(word >> 32) }

func word(gen uint32, st uint64) uint64 { return uint64(gen)<<32 | st }

// slot is one registration. The plain fields are written by Add before the
// state word becomes active and cleared by the release after the grace
// period; a waiter reads them only after validating the word.
type slot struct {
	state  atomic.Uint64
	pend   atomic.Uint32 // events accumulated under bitPending
	events atomic.Uint32 // interest set, as registered or modified

	// ctlMu serialises epoll_ctl on this slot's fd (Modify, re-arm, the
	// EPOLL_CTL_DEL of Delete), so none of them can act on the fd after
	// the registration moved on.
	ctlMu sync.Mutex

	fd        int
	waiter    int // owning waiter (PerWaiter), else -1
	closeFD   bool
	attached  bool   // counted in its waiter's Attached, until detached
	reason    Reason // written by whoever won the CAS to released
	onEvent   func(Event)
	onRelease func(Released)
	addedAt   int64 // ns since Poller.base

	// Written by the dispatching waiter (one at a time), read by Info and
	// the release: atomics, as Info may run on any goroutine.
	lastWaiter atomic.Int32 // last waiter to dispatch it, -1 if none
	nEvents    atomic.Uint64
	handlerNs  atomic.Int64
	bytesIn    atomic.Uint64
	bytesOut   atomic.Uint64

	deletedAt atomic.Int64 // ns since Poller.base, when it was released
	warned    atomic.Bool  // the watchdog reported it

	// Guarded by ctlMu: the registration's timers and context, stopped
	// and cancelled when it is released.
	timers []*regTimer
	ctx    context.Context
	cancel context.CancelFunc
}

// regTimer is one AfterFunc timer. fired is guarded by the slot's ctlMu.
type regTimer struct {
	t     *time.Timer
	f     func()
	fired bool
}

// Slots live in fixed chunks that never move, so a waiter can reach a slot
// from an event's handle without a lock while Add grows the table.
const (
	chunkBits = 10
	chunkSize = 1 << chunkBits
	maxChunks = 1 << 14 // 16M slots: far above any fd limit
)

type chunk [chunkSize]slot

type table struct {
	chunks [maxChunks]atomic.Pointer[chunk]

	mu   sync.Mutex
	free []uint32 // recycled slot indexes, LIFO for cache warmth
	next uint32   // first never-used index
}

// get returns slot i, or nil if it was never allocated.
func (t *table) get(i uint32) *slot {
	ci := i >> chunkBits
	if ci >= maxChunks {
		return nil
	}
	c := t.chunks[ci].Load()
	if c == nil {
		return nil
	}
	return &c[i&(chunkSize-1)]
}

// alloc returns a free slot index, or false if the table is full.
func (t *table) alloc() (uint32, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if n := len(t.free); n > 0 {
		i := t.free[n-1]
		t.free = t.free[:n-1]
		return i, true
	}
	i := t.next
	ci := i >> chunkBits
	if ci >= maxChunks {
		return 0, false
	}
	if t.chunks[ci].Load() == nil {
		c := new(chunk)
		for k := range c {
			c[k].state.Store(word(1, stFree))
			c[k].waiter = -1
			c[k].lastWaiter.Store(-1)
		}
		t.chunks[ci].Store(c)
	}
	t.next++
	return i, true
}

// recycle returns slot i to the free list.
func (t *table) recycle(i uint32) {
	t.mu.Lock()
	t.free = append(t.free, i)
	t.mu.Unlock()
}

// used returns how many slot indexes were ever allocated.
func (t *table) used() uint32 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.next
}
