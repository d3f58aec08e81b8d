package poller

import "errors"

// An fd the caller closed while another descriptor still shares its open
// file (a dup, a child forked without close-on-exec, a copy sent over a
// Unix socket) leaves an entry in every epoll set it was added to: the
// entry belongs to the file, which lives on, and EPOLL_CTL_DEL and
// EPOLL_CTL_MOD can name it only by the closed number, which may by now be
// another file's. Level-triggered, such an entry reports the other
// descriptor's readiness on every epoll_wait for as long as that
// descriptor lives: on a per-waiter set, a waiter woken hundreds of
// thousands of times a second, a core burnt for nothing. Closing the set
// is the one way to remove the entry, so the Delete that finds one wakes
// the waiter, which renews its set: a fresh one with every other entry
// copied, in the old one's place. One renewal per such Delete costs less
// than keeping every entry removable, which would take a poller-owned
// duplicate of every fd the caller keeps. A shared set is not renewed: it
// registers level-triggered fds one-shot, so a surviving entry reports at
// most once, and all its waiters would have to leave the old set first.

// renewSet replaces waiter w's epoll set (PerWaiter, Stealing) with a fresh one
// holding the same registrations, less the entries no registration can
// remove. It is safe against the rest of the poller because:
//
//   - w renews its set between two epoll_waits, and on per-waiter sets
//     (PerWaiter) only w waits on it. With Stealing a stand-in may be
//     waiting on the old set: its wait holds the old set open until it
//     returns, every event it returns is validated as always, and its next
//     wait (or its parker, which adds the set by number at each park)
//     finds the fresh set under the same number;
//   - the fresh set takes the old one's number with dup3, which closes the
//     old set in the same step: Add, Modify, Delete and Add's refusal of the
//     poller's own fds, which know the set by that number, never find it
//     closed or given to another file;
//   - every epoll_ctl on the set holds w.setMu shared (lockSet) and this
//     holds it exclusively, so the old set's entries, as /proc/self/fdinfo
//     lists them, are exactly those the registrations put there: none is
//     being added or removed, and an Add waiting on setMu adds to the fresh
//     set;
//   - an entry is copied only if its handle is active and its number still
//     names its file: re-adding by number must not watch a file that took
//     the number since. Delete (end) claims and does EPOLL_CTL_DEL under
//     setMu in one step, so a registration seen released here is out of
//     the old set but for a stale entry, already counted, whose generation
//     is never active again;
//   - the fresh set reports whatever is ready when each entry is added, so
//     no registration misses readiness, level- or edge-triggered (an
//     edge-triggered one may be told again of data it was told of already),
//     and events already taken from the old set are validated as always;
//   - no registration of the set is freed meanwhile: its release comes after
//     its EPOLL_CTL_DEL, which waits for setMu.
//
// It costs an fstat and an EPOLL_CTL_ADD per registration of the set,
// during which Add, Modify and Delete on this waiter wait, and the waiter
// passes no quiescent point. If the copy fails (no /proc, the epoll watch
// limit), the old set stays, stale entry and all: a registration silently
// left out would be worse.
func (p *Poller) renewSet(w *waiter) {
	w.setMu.Lock()
	// Cleared under setMu: end flags an entry it finds under setMu shared,
	// so this renewal drops every entry flagged so far.
	w.renew.Store(false)
	dropped, err := p.copySet(w)
	if err == nil {
		p.setGen[w.set].Add(1) // every waiter of the set makes its parker again
	}
	w.setMu.Unlock()
	if err != nil {
		p.opts.Logger.Warn("poller: cannot renew a waiter's epoll set, which keeps the entry of an fd closed before Delete and the stale events it reports",
			"waiter", w.id, "err", err)
		return
	}
	for _, e := range dropped {
		p.closedEarlyFound(e.fd, e.h)
	}
}

// copySet makes w's fresh set and puts it in the old one's place. It
// returns the entries of live registrations it left out because their
// numbers no longer name their files: fds closed early, not yet deleted,
// whose entries survive through another descriptor.
func (p *Poller) copySet(w *waiter) (dropped []epollEntry, err error) {
	es, err := epollEntries(w.epfd)
	if err != nil {
		return nil, err
	}
	fresh, err := epollCreate()
	if err != nil {
		return nil, err
	}
	// Once dup3 has put it in place, the set lives on under w.epfd.
	defer closeFD(fresh)
	if err := epollAdd(fresh, p.wakefd, uint32(Readable), wakeHandle); err != nil {
		return nil, err
	}
	if err := epollAdd(fresh, p.mail[w.set].efd, uint32(Readable), mailHandle); err != nil {
		return nil, err
	}
	if p.hq.efd >= 0 {
		if err := p.addHandoff(fresh); err != nil {
			return nil, err
		}
	}
	for _, e := range es {
		if e.h.Gen() == 0 {
			continue // the poller's eventfds, added above
		}
		s := p.lookup(e.h)
		if s == nil || !s.active(e.h.Gen()) {
			continue // stale: its registration has ended
		}
		if !sameFile(e) {
			dropped = append(dropped, e)
			continue
		}
		err := epollAdd(fresh, e.fd, p.epollBits(Events(s.events.Load())), e.h)
		switch {
		case err == nil:
		case errors.Is(err, ErrInvalid):
			// The number was closed or reused since sameFile looked.
			dropped = append(dropped, e)
		default:
			return nil, err
		}
	}
	return dropped, replaceFD(fresh, w.epfd)
}
