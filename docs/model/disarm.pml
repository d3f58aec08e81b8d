/*
 * Disarming and re-arming a level-triggered epoll entry where two waiters
 * meet on one registration (poller, Topology Stealing; dispatchShared,
 * slot.enterRun, slot.finishRun, Poller.disarm, Poller.rearm). Liveness as
 * a safety property: whenever nothing else can happen (every waiter waits
 * for a report, the writer is done), no data is left unread. A lost re-arm
 * shows as the fd ready with its entry disabled and nobody to read it.
 *
 * The kernel's side: the entry is ARMED (level-triggered: reported to a
 * waiting waiter for as long as the fd is ready), ONESHOT (reported once
 * more, then DISABLED), or DISABLED. A report is one atomic step, as the
 * kernel's ready list is consulted under its own lock. EPOLL_CTL_MOD sets
 * the state; the kernel then polls the fd again, which the guard of the
 * report models (an ARMED entry on a ready fd is reportable at once).
 *
 * The poller's side, each atomic block one CAS on the slot word:
 *   enterRun   running clear: take it; else set pending, and, if disarmed
 *              is clear, set it too and disarm the entry (the caller)
 *   finishRun  pending: clear it and run again; else clear running and
 *              re-arm if disarmed was set
 *   disarm     under ctlMu: if the disarmed bit is still set, MOD to ONESHOT
 *   rearm      under ctlMu: clear the bit, MOD to ARMED
 * The handler reads everything that is ready (one step); data may arrive
 * again right after.
 *
 * Broken variants (check.sh expects each to fail):
 *   NO_REARM         the run that ends forgets the disarmed bit
 *   UNCHECKED_DISARM the disarm does not look at the bit under ctlMu, and
 *                    can land after the re-arm that answered it
 *   UNLOCKED_DISARM  the disarm checks the bit, then MODs without ctlMu
 */

#ifndef W
#define W 2
#endif
#ifndef WRITES
#define WRITES 3
#endif

#define ARMED    0
#define ONESHOT  1
#define DISABLED 2

byte entry = ARMED;
bool ready = false;
bool running = false, pending = false, disarmed = false;
bool ctl = false; /* ctlMu */
byte left = WRITES;

inline lock()   { atomic { !ctl -> ctl = true } }
inline unlock() { ctl = false }

inline rearm() {
	lock();
	disarmed = false;
	entry = ARMED;
	unlock()
}

inline disarm() {
#if defined(UNCHECKED_DISARM)
	lock();
	entry = ONESHOT;
	unlock()
#elif defined(UNLOCKED_DISARM)
	if
	:: disarmed -> entry = ONESHOT
	:: else -> skip
	fi
#else
	lock();
	if
	:: disarmed -> entry = ONESHOT
	:: else -> skip
	fi;
	unlock()
#endif
}

active proctype writer() {
	do
	:: left > 0 -> atomic { ready = true; left-- }
	:: else -> break
	od
}

active [W] proctype waiter() {
	bool owned, again, mustDisarm, wasDisarmed;
end:
	do
	:: atomic {
		/* epoll_wait returns the registration */
		entry != DISABLED && ready ->
		if
		:: entry == ONESHOT -> entry = DISABLED
		:: else -> skip
		fi
	   };
		/* enterRun */
		atomic {
			owned = false; mustDisarm = false;
			if
			:: !running -> running = true; owned = true
			:: else ->
				pending = true;
				if
				:: !disarmed -> disarmed = true; mustDisarm = true
				:: else -> skip
				fi
			fi
		};
		if
		:: owned ->
			do
			:: ready = false; /* the handler reads what is there */
				atomic {
					again = false; wasDisarmed = false;
					if
					:: pending -> pending = false; again = true
					:: else -> running = false; wasDisarmed = disarmed
					fi
				};
				if
				:: again -> skip
				:: else -> break
				fi
			od;
#ifndef NO_REARM
			if
			:: wasDisarmed -> rearm()
			:: else -> skip
			fi
#endif
		:: mustDisarm -> disarm()
		:: else -> skip
		fi
	od
}

/* Nothing else can happen: every waiter waits for a report and the writer
 * is done. The fd must not be ready then (it would be reported, were its
 * entry armed). */
active proctype lost() {
	timeout -> assert(!ready)
}
