// Package store is examples/kv's in-memory data set and its command table:
// strings and lists in a map split into shards, each behind its own mutex,
// so that commands on different keys run in parallel on different waiters.
package store

import (
	"hash/maphash"
	"sync"
	"time"
)

// DefaultShards is the number of shards of New(0).
const DefaultShards = 64

// Store is a set of keys holding strings or lists. It is safe for
// concurrent use.
type Store struct {
	shards []shard
	seed   maphash.Seed
	// Info, if set, appends sections to INFO's reply (the server's
	// clients, for instance): lines "name:value\r\n" under "# Section".
	Info func(b []byte) []byte
}

type shard struct {
	mu sync.Mutex
	m  map[string]*entry
	_  [40]byte // keep shards' mutexes on separate cache lines
}

// entry is one key's value: a string (list == nil) or a list.
type entry struct {
	str      []byte
	list     *deque
	expireAt int64 // Unix nanoseconds; 0: no expiry
}

func (e *entry) expired(now int64) bool { return e.expireAt != 0 && now >= e.expireAt }

// New returns an empty store with n shards, rounded up to a power of two;
// 0 means DefaultShards.
func New(n int) *Store {
	if n <= 0 {
		n = DefaultShards
	}
	size := 1
	for size < n {
		size *= 2
	}
	s := &Store{shards: make([]shard, size), seed: maphash.MakeSeed()}
	for i := range s.shards {
		s.shards[i].m = make(map[string]*entry)
	}
	return s
}

// shard returns key's shard, locked; the caller unlocks it.
func (s *Store) shard(key []byte) *shard {
	sh := &s.shards[maphash.Bytes(s.seed, key)&uint64(len(s.shards)-1)]
	sh.mu.Lock()
	return sh
}

// get returns key's live entry, dropping it if it has expired. The caller
// holds sh.mu.
func (sh *shard) get(key []byte) *entry {
	e := sh.m[string(key)]
	if e != nil && e.expireAt != 0 && e.expired(time.Now().UnixNano()) {
		delete(sh.m, string(key))
		return nil
	}
	return e
}

// Len returns the number of keys, expired ones not yet dropped included.
func (s *Store) Len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += len(sh.m)
		sh.mu.Unlock()
	}
	return n
}

// flush removes every key.
func (s *Store) flush() {
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		clear(sh.m)
		sh.mu.Unlock()
	}
}

// deque is a list: a ring buffer that grows at either end.
type deque struct {
	buf     [][]byte
	head, n int
}

func (d *deque) grow() {
	if d.n < len(d.buf) {
		return
	}
	nb := make([][]byte, max(4, 2*len(d.buf)))
	for i := range d.n {
		nb[i] = d.at(i)
	}
	d.buf, d.head = nb, 0
}

func (d *deque) at(i int) []byte { return d.buf[(d.head+i)%len(d.buf)] }

func (d *deque) pushFront(v []byte) {
	d.grow()
	d.head = (d.head - 1 + len(d.buf)) % len(d.buf)
	d.buf[d.head] = v
	d.n++
}

func (d *deque) pushBack(v []byte) {
	d.grow()
	d.buf[(d.head+d.n)%len(d.buf)] = v
	d.n++
}

func (d *deque) popFront() []byte {
	v := d.buf[d.head]
	d.buf[d.head] = nil
	d.head = (d.head + 1) % len(d.buf)
	d.n--
	return v
}

func (d *deque) popBack() []byte {
	i := (d.head + d.n - 1) % len(d.buf)
	v := d.buf[i]
	d.buf[i] = nil
	d.n--
	return v
}
