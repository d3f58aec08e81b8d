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
 * Bounds: -DITER=n (epoll_wait calls per waiter), -DCYCLES=n (deletes),
 * -DOTHERS=n (passes carrying other registrations' items, see others).
 */

#define W 3
#ifndef ITER
#define ITER 2
#endif
#ifndef CYCLES
#define CYCLES 2	/* deletes; CYCLES-1 re-adds; generations 1..CYCLES+1 */
#endif

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

proctype waiter(byte w) {
	byte ev, g, k, b, n;
	bool off;
	do
	:: n < ITER ->
		goOffline(w);
		/* epoll_wait: copy out the item's event while it is in the
		 * set (serialised with EPOLL_CTL_DEL), or return without it;
		 * then Online */
		if
		:: atomic { inEp -> ev = epGen }
			offline[w] = 0;
#if defined(NO_VALIDATE)
			atomic { n++; held[w] = ev; USE }
#elif defined(TWO_LOADS)
			g = gen;	/* BUG: two loads */
			atomic { n++; if :: g == ev && st == ACTIVE -> held[w] = ev; USE :: else fi }
#elif defined(TWO_LOADS_STATE_FIRST)
			g = st;		/* two loads, the other way round */
			atomic { n++; if :: g == ACTIVE && gen == ev -> held[w] = ev; USE :: else fi }
#else
			/* the one validating load of the slot word */
			atomic { n++; if :: gen == ev && st == ACTIVE -> held[w] = ev; USE :: else fi }
#endif
		:: atomic { offline[w] = 0; n++ }	/* no event */
		fi
	:: else -> break
	od;
	goOffline(w)	/* then blocked in epoll_wait for good */
}

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
