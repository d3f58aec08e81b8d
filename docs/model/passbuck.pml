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
 *   DETACH      a handler that blocks on a shared set. Dispatch is enterRun:
 *               one CAS validates the event and sets the slot's running
 *               bit, finishRun clears it; the release treats the bit as a
 *               hold (waitHolds, then whoever clears the bit retires the
 *               release again). The monitor may find the watched waiter DW
 *               stuck inside a batch (an event claimed, the next claim not
 *               made) and, with one CAS of its claim cursor, take the rest
 *               of the batch and detach it: Offline on its behalf, then a
 *               signal; DW's next claim finds the cursor detached, waits
 *               for the signal, comes Online, and only then goes on. Any
 *               of DW's handlers, ours or another registration's, may
 *               block for good. PARKED becomes: every release completed,
 *               or ours waits for the pin of the handler blocked in it
 *               and for nothing else. Variants:
 *     NO_RUN_PIN        the release ignores the running bit
 *     PEND_OR           finding the slot running elsewhere, enterRun ORs the
 *                       events into pend between its validating load and
 *                       its CAS
 *     NO_RETIRE_AGAIN   the last pin clears waitHolds without retiring the
 *                       release again
 *     NO_OFFLINE_FOR    the monitor takes the batch but leaves the waiter
 *                       online in the reclaimer
 *     FOR_OFFLINE_LAST  the monitor's Offline for the waiter looks at its
 *                       list before storing offline
 *   ONLINE_EARLY (reattach without waiting for the monitor), NEVER_ONLINE
 *   (DW never online) and DETACH_ANYWHERE (no cursor condition) pass: the
 *   pin alone keeps every run safe; see README.md.
 * Bounds: -DITER=n (epoll_wait calls per waiter), -DCYCLES=n (deletes),
 * -DOTHERS=n (passes carrying other registrations' items, see others),
 * -DLEAVES=n (leave-and-join rounds, MEMBERSHIP), -DLEAVER=w (which waiter
 * leaves, MEMBERSHIP; default 0), -DDW=w (the watched waiter, DETACH;
 * default 0).
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
 * (DETACH: until its run ends, finishRun) (0: none; generations start
 * at 1). */
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
#ifdef DETACH
#ifndef DW
#define DW 0		/* the waiter the monitor watches */
#endif
#if defined(HANDOFF) || defined(MEMBERSHIP) || defined(OTHERS)
#error "DETACH is a configuration of its own (it has its own batch and monitor)"
#endif
/* Two more bits of the slot word, changed only together with it. */
bool running;		/* running: a waiter runs OnEvent (validated by CAS) */
bool wh;		/* waitHolds: the grace period ended under the pin */
/* A waiter's batch: our slot's unclaimed event (a raw handle, 0: none or
 * claimed), and where the claim cursor stands. */
byte bat[W];
#define OUT 0		/* between batches, or no claim yet: not detachable */
#define IN  1		/* event j-1 claimed, the next claim not yet made */
#define DET 2		/* detached (END|DETACH): every claim finds it */
byte cur[W];
bool sig[W];		/* the monitor's Offline for w is done (w.attach) */
/* Ghosts: 1 + the waiter blocked for good in a handler (at most one), and
 * the generation of ours that handler runs (0: another registration's). */
byte hung;
byte hungon;
#endif

#define NOHOLDER(g) (held[0] != g && held[1] != g && held[2] != g)

/* The batch b has passed the last waiter: run the release (poller.release). */
#ifdef DETACH
/* toFreeing treats the running bit as a hold: a handler still running
 * (on a detached waiter, the only kind the grace period can pass) keeps
 * the slot; waitHolds is set and whoever clears the bit retires the
 * release again. Otherwise released becomes freeing in the same CAS. */
inline release() {
	atomic {
		if
#ifndef NO_RUN_PIN
		:: running -> wh = 1; b = 0		/* waits for the pin */
#endif
		:: else ->
			assert(st == RELEASED && NOHOLDER(gen));	/* RELEASE */
			freeing = 1		/* OnRelease, close(fd) */
		fi
	}
	if
	:: b > 0 ->
		atomic { gen++; st = FREE; freeing = 0; nrel++; b = 0 }
		avail = 1
	:: else
	fi
}
#else
inline release() {
	atomic {
		assert(st == RELEASED && NOHOLDER(gen));	/* RELEASE */
		freeing = 1;		/* OnRelease, close(fd) */
		b = 0
	}
	atomic { gen++; st = FREE; freeing = 0; nrel++ }	/* one store */
	avail = 1		/* table.recycle */
}
#endif

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
#elif defined(DETACH)
/* epoll_wait copies the event into the watched waiter's batch, unclaimed;
 * the others' cursors nobody looks at. */
#define COPYOUT		if :: w == DW -> bat[w] = epGen :: else -> ev = epGen fi
#else
#define COPYOUT		ev = epGen
#endif

#ifdef DETACH
#ifdef NEVER_ONLINE
#define GO_ONLINE	if :: w != DW -> offline[w] = 0 :: else fi	/* DW: never */
#else
#define GO_ONLINE	offline[w] = 0
#endif
/* enterRun: the validating CAS. Generation x, active, running bit clear:
 * set the bit; the waiter now holds generation x, pinned. Running on
 * another waiter: the events are left to that waiter (pending), and this
 * one holds nothing. Recorded by a CAS that checks the generation, that
 * path is one atomic step too, and its only effect, one more run on the
 * runner, is a longer handler, which the model has anyway. Otherwise the
 * event is stale. */
#define VALIDATE_RUN(x)	if :: gen == x && st == ACTIVE && !running -> running = 1; held[w] = x; USE \
			   :: else fi

/* A handler may block for good (at most one does, the ghost hung): the
 * waiter stays inside its batch, and it is up to the monitor to detach it.
 * hungon: the generation of ours it runs, 0 for another registration. */
#define HANG		atomic { hung == 0 -> hung = w + 1; hungon = held[w] }; goto endhung

/* finishRun (and stopRunning, after a final event): the run ends and the
 * pin goes, in one CAS on the slot word. If the release found the pin
 * after its grace period (waitHolds), this was the last one: clear
 * waitHolds and retire the release again (Retire, as the deleter does:
 * append to list 0, store has, load offline[0], signal), a fresh grace
 * period; never run it here. */
inline finishrun(w) {
	atomic {
		USE;
		held[w] = 0; running = 0;
		if
		:: wh -> wh = 0; rr = 1
		:: else
		fi
	}
	if
	:: rr ->
#ifdef NO_RETIRE_AGAIN
		rr = 0		/* BUG: waitHolds cleared, the release dropped */
#else
		atomic { !lk[0] -> lk[0] = 1; list[0]++; has[0] = 1 }
		atomic { off = offline[0]; lk[0] = 0 }
		atomic { if :: off -> wake = 1 :: else fi; off = 0; rr = 0 }
#endif
	:: else
	fi
}

/* The batch, after Online. The watched waiter DW: our slot's event (if
 * epoll_wait copied it out) and another registration's, one before or
 * after it, or none. Each claim is the cursor's atomic add, which finds
 * the cursor detached once the monitor has taken the rest of the batch.
 * Any handler may block for good (HANG): another registration's (its own
 * pin is not modelled: only our slot's releases are) or ours, pinned.
 * The other waiters, which the monitor leaves alone, claim and validate
 * our event in one step (nobody else looks at their cursors). */
inline runbatch(w) {
	if
	:: w != DW ->
		atomic { VALIDATE_RUN(ev); ev = 0 }
		if
		:: held[w] != 0 -> finishrun(w)
		:: else
		fi;
		goto batchend
	:: else
	fi;
	if
	:: atomic { cur[w] = IN; o = 1 }	/* another's event first */
	:: atomic { cur[w] = IN; o = 1 }; HANG
	:: skip
	fi;
	/* claim our event, unless the monitor took it (the waiter was then
	 * detached, and its claim finds that) */
	atomic {
		if
		:: cur[w] != DET && bat[w] != 0 -> ev = bat[w]; bat[w] = 0; cur[w] = IN
		:: else
		fi
	}
	if
	:: ev != 0 ->
		/* enterRun, a step of its own: the monitor may detach the
		 * waiter between its claim and its validation, which it then
		 * makes offline */
#ifdef PEND_OR
		/* BUG: running elsewhere, it ORs the events into pend after the
		 * validating load and before its CAS: a write to the slot that
		 * only the load vouches for */
		atomic {
			if
			:: gen == ev && st == ACTIVE && !running -> running = 1; held[w] = ev; USE
			:: gen == ev && st == ACTIVE && running -> held[w] = ev; q = 1
			:: else
			fi;
			ev = 0
		}
		if
		:: q ->
			atomic { USE }			/* pend.Or */
			atomic { held[w] = 0; q = 0 }	/* the CAS: pending */
		:: else
		fi
#else
		atomic { VALIDATE_RUN(ev); ev = 0 }
#endif
	:: else
	fi;
	if
	:: held[w] != 0 ->
		if
		:: finishrun(w)
		:: HANG		/* our handler blocks, pinned */
		fi
	:: else
	fi;
	if
	:: atomic { !o && cur[w] != DET -> cur[w] = IN }	/* another's after */
	:: atomic { !o && cur[w] != DET -> cur[w] = IN }; HANG
	:: skip
	fi;
	/* the claim past the end: the batch is over, unless it finds the
	 * cursor detached; then the waiter waits until the monitor's Offline
	 * on its behalf is done, comes Online and clears DETACH (reattach),
	 * and only then goes on */
	if
	:: atomic { cur[w] != DET -> cur[w] = OUT; o = 0 }
#ifdef ONLINE_EARLY
	:: atomic { cur[w] == DET -> GO_ONLINE; cur[w] = OUT; o = 0 }	/* does not wait */
#else
	:: atomic { cur[w] == DET && sig[w] -> sig[w] = 0; GO_ONLINE; cur[w] = OUT; o = 0 }
#endif
	fi;
batchend:
	skip
}
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
#ifdef DETACH
	bool rr, o, q;
#endif
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
#ifdef DETACH
		if
		:: atomic { inEp -> COPYOUT }
		:: skip
		fi;
		atomic { GO_ONLINE; n++ }
		runbatch(w)
#else
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
#endif
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
#ifdef DETACH
	;
	goto done;
endhung:		/* in a handler, for good */
	false;
done:	skip
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

#ifdef DETACH
/* The monitor: a waiter inside a batch (cursor at j: event j-1 claimed,
 * the next claim not made) may be found stuck at any time, a superset of
 * "has not moved for Overrun". One CAS of its cursor, from j to
 * END|DETACH, takes the rest of the batch and the waiter's part in the
 * reclaimer. The rest leaves the model here: raw handles, which a picker
 * validates like fresh events (the HANDOFF configuration checks the
 * queue). Then offlineFor: Offline on the waiter's behalf (store offline,
 * then look at the list, as Offline does: the Dekker pair with carry),
 * then the signal that lets the waiter come back. A step of its own after
 * the CAS: passers may find the waiter still online in between. The code
 * runs offlineFor on a goroutine of its own; watching one waiter, the
 * monitor has nothing else to do meanwhile. */
inline offlinefor(d) {
#if defined(NO_OFFLINE_FOR)
	skip;		/* BUG: the stuck waiter keeps its part */
#elif defined(FOR_OFFLINE_LAST)
	quiesce(d);
	offline[d] = 1;	/* BUG: stored after the list was looked at */
#else
	offline[d] = 1;
	quiesce(d);
#endif
	sig[d] = 1
}
#ifdef DETACH_ANYWHERE
#define DETACHABLE	cur[DW] != DET	/* between batches too */
#else
#define DETACHABLE	cur[DW] == IN
#endif
active proctype monitor() {
	byte k, b;
	bool off;
end:	do
	:: atomic { DETACHABLE -> cur[DW] = DET; bat[DW] = 0 }; offlinefor(DW)
	od
}
/* A slot pinned by a handler blocked for good is never freed: the adder
 * and the deleter may then wait for ever. */
#define MAYSTOP(l)	l:
#else
#define MAYSTOP(l)
#endif

/* Delete from any goroutine (a waiter's handler included: the waiter's
 * own state is the same whichever process takes these steps). */
active proctype deleter() {
	byte h, n;
	bool idle;
	do
	:: n < CYCLES ->
		MAYSTOP(enddel) atomic { issued -> issued = 0; h = epGen }
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
		MAYSTOP(endadd) atomic { avail -> avail = 0 }	/* table.alloc */
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
#ifdef DETACH
	/* with a handler of ours blocked for good, its release waits for the
	 * pin alone (its grace period is over), and no other is pending */
	timeout -> assert(nrel == CYCLES || wh && hungon == gen)
#else
	timeout -> assert(nrel == CYCLES)
#endif
}
#endif

init {
	atomic {
		run waiter(0);
		run waiter(1);
		run waiter(2)
	}
}
