package poller

import (
	"sync"
	"sync/atomic"
)

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
			c[k].init(ci<<chunkBits | uint32(k))
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
