/*
 * passbuck.pml: pass-the-buck reclamation in SkipOffline mode, offline
 * waiters around epoll_wait, and validation of events against the slot
 * word (docs/design.md sections 3, 5, 6; passbuck/passbuck.go;
 * poller/poller_linux.go run, dispatchOwned, Delete, release).
 *
 * One slot, W = 3 waiters. Go's sync/atomic is sequentially consistent, so
 * every atomic load or store is one Promela statement on a global variable
 * and interleaving semantics is exact. A mutex is a bit; a critical section
 * is split only where a lock-free reader or writer can observe the middle
 * (has is stored, then offline is loaded: the Dekker pair).
 *
 * Properties (all assertions):
 *   USE       a waiter that validated generation g finds the slot still at
 *             generation g and not being freed (no use-after-free, no
 *             event delivered to a reused slot);
 *   RELEASE   when a release starts, no waiter holds a validated reference
 *             to that generation, and the slot is released (exactly once);
 *   PARKED    when nothing can move any more (all waiters blocked in
 *             epoll_wait for good), every deleted registration has been
 *             released: no batch is parked on a blocked waiter.
 *
 * Variants (spin -D<NAME> -a passbuck.pml); each must violate an assertion:
 *   TWO_LOADS           validation loads the generation, then the state
 *   NO_VALIDATE         naive "offline around epoll_wait", no validation
 *   CHECK_OUTSIDE_LOCK  carry() loads offline[k] before taking k's mutex
 *   NO_SIGNAL           Retire never wakes the reclaimer's goroutine
 *   OFFLINE_LAST        Offline looks at its list before storing offline
 * TWO_LOADS_STATE_FIRST (state, then generation) passes: see README.md.
 *
 * Features (separate configurations of the correct model):
 *   HANDOFF     a shared set's batch is claimed event by event through a
 *               cursor; a monitor may take the unclaimed rest (raw handles)
 *               into a poller-wide queue; any waiter, once online after its
 *               epoll_wait, picks from the queue and validates like a fresh
 *               event. Variants:
 *     TRUST_QUEUED        the monitor validates when it queues, the picker
 *                         trusts the queued event
 *     PICK_BEFORE_ONLINE  the picker takes and validates a queued event
 *                         before its Online store
 *   MEMBERSHIP  waiter 0 leaves (Leave: left, then Offline) and joins again
 *               (Join: online) LEAVES times between batches, may poll
 *               online (Quiesce, epoll_wait(0)), and at the end either
 *               blocks for good or leaves for good. Variants:
 *     LEAVE_HOLDING         Leave before the hold on the last event ends
 *     VALIDATE_BEFORE_JOIN  an event obtained and validated before Join
 *     JOIN_KEEPS_ABSENT     Join clears left but not offline
 *     LEAVE_ONLINE          Leave stores left but not offline
 * Bounds: -DITER=n (epoll_wait calls per waiter), -DCYCLES=n (deletes),
 * -DOTHERS=n (passes carrying other registrations' items, see others),
 * -DLEAVES=n (leave-and-join rounds, MEMBERSHIP), -DLEAVER=w (which waiter
 * leaves, MEMBERSHIP; default 0).
 */

#define W 3
#ifndef ITER
#define ITER 2
#endif
#ifndef CYCLES
#define CYCLES 2	/* deletes; CYCLES-1 re-adds; generations 1..CYCLES+1 */
#endif

#ifndef LEAVES
#define LEAVES 1
#endif
#ifndef LEAVER
#define LEAVER 0	/* the waiter that leaves and joins (MEMBERSHIP) */
#endif
#define NGEN (CYCLES + 1)	/* handles carry generations 1..CYCLES */

#define FREE     0
#define ACTIVE   1
#define RELEASED 2

/* The slot word (generation, lifecycle), stored and loaded as one unit. */
byte gen = 1;
byte st = ACTIVE;
bool freeing;		/* release running: OnRelease, close(fd) */
bool avail;		/* slot on the table's free list */
byte nrel;		/* releases run */

/* The kernel: one epoll item, present from EPOLL_CTL_ADD to _DEL. */
bool inEp = 1;
byte epGen = 1;		/* generation in the item's epoll_event.data */
bool issued = 1;	/* Add returned the handle (Delete may use it) */

/* passbuck: per-waiter mutex, list (a count; one slot means 0 or 1),
 * has flag, offline flag; the reclaimer goroutine's coalesced wake-up. */
bool lk[W];
byte list[W];
bool has[W];
bool offline[W];
bool wake;

/* Ghost: generation waiter w validated and holds until its quiescent point
 * (0: none; generations start at 1). */
byte held[W];

#ifdef HANDOFF
/* A waiter's batch: the one unclaimed event of our slot behind the cursor
 * (a raw handle, i.e. its generation; 0: none or claimed). The hand-off
 * queue: how many raw copies of each generation's handle it holds. */
byte bat[W];
byte hq[NGEN];
#endif
#ifdef MEMBERSHIP
bool gone[W];		/* participant left (ghost of passbuck's left flag) */
#endif

#define NOHOLDER(g) (held[0] != g && held[1] != g && held[2] != g)

/* The batch b has passed the last waiter: run the release (poller.release). */
inline release() {
	atomic {
		assert(st == RELEASED && NOHOLDER(gen));	/* RELEASE */
		freeing = 1;		/* OnRelease, close(fd) */
		b = 0
	}
	atomic { gen++; st = FREE; freeing = 0; nrel++ }	/* one store */
	avail = 1		/* table.recycle */
}

/* passbuck carry(k, b): append b to list k under k's mutex, store has,
 * load offline; while k is offline take its whole list on to k+1. */
inline carry(start) {
	k = start;
	do
	:: k == W ->
		if
		:: b > 0 -> release()
		:: else		/* an empty batch: run(nil) does nothing */
		fi;
		break
	:: k < W ->
#ifdef CHECK_OUTSIDE_LOCK
		off = offline[k];	/* BUG: loaded before the append */
#endif
		atomic {
			!lk[k] -> lk[k] = 1;
			list[k] = list[k] + b; b = 0;
			if
			:: list[k] == 0 -> lk[k] = 0; break
			:: else -> has[k] = 1
			fi
		}
		atomic {
#ifndef CHECK_OUTSIDE_LOCK
			off = offline[k];
#endif
			if
			:: off -> b = list[k]; list[k] = 0; has[k] = 0;
				lk[k] = 0; off = 0; k++
			:: else -> lk[k] = 0; break	/* k passes it later */
			fi
		}
	od;
	k = 0
}

/* passbuck Quiesce(w): one load if nothing is pending, else take and carry. */
inline quiesce(w) {
	if
	:: has[w] ->
		atomic { !lk[w] -> b = list[w]; list[w] = 0; has[w] = 0 }
		carry(w + 1)
	:: else
	fi
}

/* USE: waiter w runs the handler on the slot it validated: the slot must
 * still be at the validated generation and not being freed. Checked when
 * the hold starts (in the validating step) and when it ends (at the
 * quiescent point); the RELEASE assertion covers every state in between
 * (a hold that began before a release started is caught there, one that
 * began after is caught here). */
#define USE	assert(gen == held[w] && !freeing)

/* passbuck Offline(w): the quiescent point before epoll_wait. held[w] is
 * cleared here (the waiter holds nothing from its last batch), together
 * with the dead locals, which keeps the state space small. */
#define QUIESCENT	if :: held[w] != 0 -> USE :: else fi; \
			held[w] = 0; ev = 0; g = 0
inline goOffline(w) {
#ifdef OFFLINE_LAST
	atomic { QUIESCENT }
	quiesce(w);
	offline[w] = 1		/* BUG: Dekker order reversed */
#else
	atomic { QUIESCENT; offline[w] = 1 }
	quiesce(w)
#endif
}

/* The one validating load of the slot word (generation and lifecycle
 * together); on a match the waiter holds generation x. */
#define VALIDATE(x)	if :: gen == x && st == ACTIVE -> held[w] = x; USE :: else fi

#ifdef HANDOFF
/* epoll_wait copies the event into the waiter's batch, unclaimed. */
#define COPYOUT		bat[w] = epGen
/* Claim the batch's event through the cursor (an atomic swap, racing the
 * monitor's), then validate it. The claim is merged with the validating
 * load: between the two the event is in the waiter's locals, seen by
 * nobody, so delaying the claim to the load only adds behaviours. */
#define CLAIM		if :: bat[w] != 0 -> ev = bat[w]; bat[w] = 0; VALIDATE(ev) \
			   :: else fi; ev = 0
#ifdef TRUST_QUEUED
#define PICKED(x)	held[w] = x; USE	/* BUG: trusts the queued event */
#else
#define PICKED(x)	VALIDATE(x)		/* validated like a fresh event */
#endif
/* Take one raw handle from the hand-off queue into the batch and validate
 * it (taking one per epoll_wait, in any order, is enough: at most one
 * queued generation is current, the others are dropped by validation). */
inline pick(w) {
	if
	:: atomic { hq[1] > 0 -> hq[1]--; PICKED(1) }
#if CYCLES >= 2
	:: atomic { hq[2] > 0 -> hq[2]--; PICKED(2) }
#endif
#if CYCLES >= 3
	:: atomic { hq[3] > 0 -> hq[3]--; PICKED(3) }
#endif
#if CYCLES >= 4
	:: atomic { hq[4] > 0 -> hq[4]--; PICKED(4) }
#endif
	:: skip
	fi
}
/* After Online: the batch's own event and one picked from the queue, in
 * either order (-DCLAIM_FIRST: own event first only, to bound the state
 * space of the combined HANDOFF and MEMBERSHIP configuration). */
inline claimpick(w) {
	if
	:: atomic { n++; CLAIM }
		pick(w)
#ifndef CLAIM_FIRST
	:: pick(w);
		atomic { n++; CLAIM }
#endif
	fi
}
#else
#define COPYOUT		ev = epGen
#endif

#ifdef MEMBERSHIP
/* passbuck Leave(w) at a quiescent point, after the last batch: left is
 * stored, then Offline (offline stored, then the list looked at). left is
 * read only by its owner (SkipOffline passers look at offline alone), so
 * the two stores are one step. */
inline leave(w) {
#ifdef LEAVE_HOLDING
	atomic { gone[w] = 1; offline[w] = 1 }	/* BUG: still holding */
	quiesce(w);
	atomic { QUIESCENT }
#elif defined(LEAVE_ONLINE)
	atomic { QUIESCENT; gone[w] = 1 }	/* BUG: offline not stored */
	quiesce(w)
#else
	atomic { QUIESCENT; gone[w] = 1; offline[w] = 1 }
	quiesce(w)
#endif
}

/* passbuck Join(w): left cleared, then online. */
inline join(w) {
#ifdef VALIDATE_BEFORE_JOIN
	/* BUG: the new waiter obtains and validates an event, then joins */
	if
	:: atomic { inEp -> ev = epGen }
		atomic { VALIDATE(ev) }
	:: skip
	fi;
#endif
#ifdef JOIN_KEEPS_ABSENT
	gone[w] = 0		/* BUG: offline stays set */
#else
	atomic { gone[w] = 0; offline[w] = 0 }
#endif
}
#endif

proctype waiter(byte w) {
	byte ev, g, k, b, n;
	bool off;
#ifdef MEMBERSHIP
	byte nl;
#endif
	do
	:: n < ITER ->
#ifdef MEMBERSHIP
		if
		:: w == LEAVER ->
			/* after a batch: Quiesce, stay online, epoll_wait(0) */
			atomic { QUIESCENT }
			quiesce(w);
			if
			:: atomic { inEp -> COPYOUT }
			:: skip
			fi;
#ifdef HANDOFF
			claimpick(w)
#else
			atomic { n++; if :: ev != 0 -> VALIDATE(ev) :: else fi }
#endif
			goto nextb
		:: true
		fi;
#endif
		goOffline(w);
		/* epoll_wait: copy out the item's event while it is in the
		 * set (serialised with EPOLL_CTL_DEL), or return without it;
		 * then Online */
		if
		:: atomic { inEp -> COPYOUT }
#if defined(HANDOFF)
#ifdef PICK_BEFORE_ONLINE
			pick(w);	/* BUG: before Online */
			offline[w] = 0;
			atomic { n++; CLAIM }
#else
			offline[w] = 0;
			claimpick(w)
#endif
#elif defined(NO_VALIDATE)
			offline[w] = 0;
			atomic { n++; held[w] = ev; USE }
#elif defined(TWO_LOADS)
			offline[w] = 0;
			g = gen;	/* BUG: two loads */
			atomic { n++; if :: g == ev && st == ACTIVE -> held[w] = ev; USE :: else fi }
#elif defined(TWO_LOADS_STATE_FIRST)
			offline[w] = 0;
			g = st;		/* two loads, the other way round */
			atomic { n++; if :: g == ACTIVE && gen == ev -> held[w] = ev; USE :: else fi }
#else
			offline[w] = 0;
			/* the one validating load of the slot word */
			atomic { n++; VALIDATE(ev) }
#endif
		:: 
#if defined(HANDOFF)
#ifdef PICK_BEFORE_ONLINE
			pick(w);	/* BUG: before Online */
			atomic { offline[w] = 0; n++ }
#else
			atomic { offline[w] = 0; n++ }	/* no event of ours */
			pick(w)
#endif
#else
			atomic { offline[w] = 0; n++ }	/* no event */
#endif
		fi
#ifdef MEMBERSHIP
nextb:		skip
	:: w == LEAVER && nl < LEAVES ->
		leave(w);	/* an idle waiter retired ... */
		join(w);	/* ... and started again */
		nl++
#endif
	:: n == ITER -> break
	od;
#ifdef MEMBERSHIP
	if
	:: w == LEAVER -> leave(w)	/* retired for good */
	:: goOffline(w)
	fi
#else
	goOffline(w)	/* then blocked in epoll_wait for good */
#endif
}

#ifdef HANDOFF
/* The monitor: when a waiter stays in one handler too long, it swaps the
 * cursor to take the unclaimed rest of the batch (raw handles, not
 * validated), appends it to the hand-off queue and signals the shared
 * set's eventfd. The swap and the append are one step (the handle is in
 * the monitor's hands between them, seen by nobody). The eventfd is not
 * modelled: any waiter's epoll_wait may return, and then pick. */
#ifdef TRUST_QUEUED
#define QUEUE(i)	if :: gen == bat[i] && st == ACTIVE -> hq[bat[i]]++ :: else fi; bat[i] = 0
#else
#define QUEUE(i)	hq[bat[i]]++; bat[i] = 0
#endif
active proctype monitor() {
end:	do
	:: atomic { bat[0] != 0 -> QUEUE(0) }
	:: atomic { bat[1] != 0 -> QUEUE(1) }
	:: atomic { bat[2] != 0 -> QUEUE(2) }
	od
}
#endif

/* Delete from any goroutine (a waiter's handler included: the waiter's
 * own state is the same whichever process takes these steps). */
active proctype deleter() {
	byte h, n;
	bool idle;
	do
	:: n < CYCLES ->
		atomic { issued -> issued = 0; h = epGen }
		atomic { assert(gen == h && st == ACTIVE); st = RELEASED }	/* CAS */
		inEp = 0;	/* EPOLL_CTL_DEL */
		/* Retire: append to list 0, store has, load offline[0] */
		atomic { !lk[0] -> lk[0] = 1; list[0]++; has[0] = 1 }
		atomic { idle = offline[0]; lk[0] = 0 }
		atomic {
#ifndef NO_SIGNAL
			if :: idle -> wake = 1 :: else fi;
#endif
			idle = 0; h = 0; n++
		}
	:: else -> break
	od
}

/* Add: reuse the freed slot with its new generation. */
active proctype adder() {
	byte n;
	do
	:: n < CYCLES - 1 ->
		atomic { avail -> avail = 0 }	/* table.alloc */
		st = ACTIVE;			/* store word(gen, active) */
		atomic { epGen = gen; inEp = 1; issued = 1 }	/* EPOLL_CTL_ADD */
		n++
	:: else -> break
	od
}

/* The Reclaimer's own goroutine: carries list 0 when signalled. */
active proctype reclaimer() {
	byte k, b;
	bool off;
end:	do
	:: atomic { wake -> wake = 0 }
		if
		:: has[0] -> carry(0)
		:: else
		fi
	od
}

/* -DOTHERS=n: n passes of batches of other registrations' releases. One
 * slot means one item in the lists; in the real system a passer may come
 * into list j at any time carrying other items, and takes list j on (our
 * item included) if j is offline. Such a batch is empty as far as our
 * item is concerned, so: carry(j) with an empty batch, j chosen freely.
 * (Spurious reclaimer wake-ups are the case j = 0.) */
#ifdef OTHERS
active proctype others() {
	byte j, k, b, n;
	bool off;
	do
	:: n < OTHERS ->
		if :: j = 0 :: j = 1 :: j = 2 fi;
		carry(j); j = 0; n++
	:: else -> break
	od
}
#endif

/* PARKED: once nothing can move, every registration was released.
 * -DNOPARKED drops the check (run pan with -E then), to look for safety
 * violations alone. */
#ifndef NOPARKED
active proctype parked() {
	timeout -> assert(nrel == CYCLES)
}
#endif

init {
	atomic {
		run waiter(0);
		run waiter(1);
		run waiter(2)
	}
}
