#!/usr/bin/env bash
# Model-check docs/model/passbuck.pml and docs/model/disarm.pml with spin:
# each correct configuration (the base model, OTHERS, HANDOFF, MEMBERSHIP,
# HANDOFF with MEMBERSHIP, DETACH; disarm with 2 and 3 waiters) must pass
# an exhaustive search, and every deliberately broken variant must violate
# the assertion it is meant to break. Installs nothing (needs spin and
# gcc); builds in a temporary directory, so nothing is left in the
# repository.
#
#   bash docs/model/check.sh       # default bounds: 2-4 minutes (load), <1.5 GB
#   BOUNDS="-DITER=3" CCFLAGS=-DCOLLAPSE bash docs/model/check.sh   # deeper
#
# BOUNDS goes to spin (-DITER=n epoll_wait calls per waiter, -DCYCLES=n
# deletes, -DLEAVES=n leave-and-join rounds, -DDW=w the waiter the DETACH
# monitor watches), CCFLAGS to gcc when building
# pan (-DCOLLAPSE trades time for memory). A line that sets -DITER=1 keeps
# it whatever BOUNDS says (its own -D comes last).
#
# Exit status: 0 if every expectation holds, 1 if one is broken, 2 if a tool
# is missing.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
for tool in spin gcc; do
	if ! command -v "$tool" >/dev/null 2>&1; then
		echo "check.sh: $tool not found (Debian: apt-get install -y spin gcc)" >&2
		exit 2
	fi
done

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp "$here/passbuck.pml" "$here/disarm.pml" "$tmp/"
cd "$tmp"

BOUNDS=${BOUNDS:-}
CCFLAGS=${CCFLAGS:-}
# The assertion each kind of failure must hit (pan prints its expression).
USE='gen==held'          # USE: the validated generation is still current
RELEASE='held\[0\]!=gen' # RELEASE: nobody holds what is being released
PARKED='nrel=='          # PARKED: nothing parked once everything is blocked
LOST='!\(ready\)'           # LOST: no data left unread once nothing can move (disarm.pml)
model=passbuck.pml       # the model check() builds

broken=0
start=$SECONDS

# check NAME EXPECT PATTERN PANFLAGS CCEXTRA [spin -D flags...]
#   EXPECT is pass or fail; PATTERN (fail only) is an ERE that the violated
#   assertion must match; CCEXTRA goes to gcc after CCFLAGS.
check() {
	local name=$1 expect=$2 pattern=$3 panflags=$4 ccextra=$5
	shift 5
	local t0=$SECONDS
	rm -f pan pan.* ./*.trail
	# shellcheck disable=SC2086 # BOUNDS, CCFLAGS, panflags are word lists;
	# a -D in a line's own flags overrides the same one in BOUNDS
	if ! spin $BOUNDS "$@" -a "$model" >spin.out 2>&1 ||
		! gcc -w -O2 -DSAFETY $CCFLAGS $ccextra -o pan pan.c >gcc.out 2>&1; then
		echo "FAIL  $name: spin or gcc failed"
		cat spin.out gcc.out
		broken=1
		return
	fi
	# shellcheck disable=SC2086
	./pan -m100000 $panflags >pan.out 2>&1 || true
	local errors states depth elapsed violated trail="" verdict
	errors=$(sed -n 's/.*errors: \([0-9]*\).*/\1/p' pan.out | head -1)
	states=$(awk '/states, stored/ {print $1; exit}' pan.out)
	depth=$(sed -n 's/.*depth reached \([0-9]*\).*/\1/p' pan.out | head -1)
	elapsed=$(sed -n 's/^pan: elapsed time \([0-9.e+-]*\) seconds.*/\1/p' pan.out)
	violated=$(sed -n 's/^pan:1: assertion violated \(.*\) (at depth.*/\1/p' pan.out | head -1)
	local which=""
	case "$violated" in
	*'held[0]!=gen'*) which=RELEASE ;;
	*gen==held*) which=USE ;;
	*nrel==*) which=PARKED ;;
	*'!(ready)'*) which=LOST ;;
	esac
	if [ -z "$errors" ]; then
		echo "FAIL  $name: no result from pan"
		cat pan.out
		broken=1
		return
	fi
	if [ "$expect" = pass ]; then
		if [ "$errors" = 0 ] && grep -q 'Full statespace search' pan.out &&
			! grep -Eq 'Search not completed|max search depth too small|out of memory' pan.out; then
			verdict="ok    $name: errors: 0 (expected 0)"
		else
			verdict="FAIL  $name: errors: $errors (expected 0)"
			broken=1
		fi
	else
		if [ "$errors" -ge 1 ] && printf '%s\n' "$violated" | grep -Eq "$pattern"; then
			# shellcheck disable=SC2086
			trail=$(spin $BOUNDS "$@" -t "$model" 2>&1 |
				sed -n 's/.*trail ends after \([0-9]*\) steps.*/\1/p')
			verdict="ok    $name: errors: $errors (expected >=1), $which assertion violated, trail $trail steps"
		else
			verdict="FAIL  $name: errors: $errors, assertion '${violated:-none}' (expected one matching $pattern)"
			broken=1
		fi
	fi
	printf '%s; %s states, depth %s, pan %ss, total %ds\n' \
		"$verdict" "$states" "$depth" "$elapsed" $((SECONDS - t0))
	if [ "$verdict" != "${verdict#FAIL}" ]; then
		tail -n 30 pan.out
	fi
}

echo "spin model check: $(spin -V | head -1); W=3, bounds ${BOUNDS:-ITER=2 CYCLES=2 LEAVES=1 DW=0}${CCFLAGS:+, cc $CCFLAGS}"
check correct pass '' '' ''
# Passers carrying other registrations' items, at any time, into any list.
check correct,OTHERS=1,ITER=1 pass '' '' '' -DOTHERS=1 -DITER=1
# Batch hand-off through the poller-wide queue (Shared topology).
check correct,HANDOFF,ITER=1 pass '' '' '' -DHANDOFF -DITER=1
# Waiter 0 leaves and joins again, and may leave for good; then the last
# waiter does (the poller's extra waiters are the last participants).
check correct,MEMBERSHIP,ITER=1 pass '' '' '' -DMEMBERSHIP -DITER=1
check correct,MEMBERSHIP,ITER=1,LEAVER=2 pass '' '' '' -DMEMBERSHIP -DITER=1 -DLEAVER=2
# Both features at once; the own event is claimed before the pick
# (CLAIM_FIRST), and COLLAPSE keeps pan under 2 GB.
check correct,HANDOFF,MEMBERSHIP,ITER=1,CLAIM_FIRST pass '' '' -DCOLLAPSE -DHANDOFF -DMEMBERSHIP -DITER=1 -DCLAIM_FIRST
# A handler that blocks on a shared set: its running bit pins its slot, and
# the monitor detaches the waiter (takes it offline in the reclaimer), so
# that other releases complete; the watched waiter is the first
# participant, then the last. COLLAPSE keeps pan near 1 GB.
check correct,DETACH,ITER=1 pass '' '' -DCOLLAPSE -DDETACH -DITER=1
check correct,DETACH,ITER=1,DW=2 pass '' '' -DCOLLAPSE -DDETACH -DITER=1 -DDW=2
check TWO_LOADS fail "$USE" '' '' -DTWO_LOADS
check NO_VALIDATE fail "$USE|$RELEASE" '' '' -DNO_VALIDATE
# Without the PARKED check (and with pan -E: a parked batch then shows as
# a blocked end state, which -E ignores) to show the use-after-free itself.
check CHECK_OUTSIDE_LOCK fail "$RELEASE|$USE" -E '' -DCHECK_OUTSIDE_LOCK -DNOPARKED
check NO_SIGNAL fail "$PARKED" '' '' -DNO_SIGNAL
check OFFLINE_LAST fail "$PARKED" '' '' -DOFFLINE_LAST
check HANDOFF:TRUST_QUEUED fail "$USE|$RELEASE" '' '' -DHANDOFF -DITER=1 -DTRUST_QUEUED
check HANDOFF:PICK_BEFORE_ONLINE fail "$USE|$RELEASE" '' '' -DHANDOFF -DITER=1 -DPICK_BEFORE_ONLINE
check MEMBERSHIP:LEAVE_HOLDING fail "$USE|$RELEASE" '' '' -DMEMBERSHIP -DITER=1 -DLEAVE_HOLDING
check MEMBERSHIP:VALIDATE_BEFORE_JOIN fail "$USE|$RELEASE" '' '' -DMEMBERSHIP -DITER=1 -DVALIDATE_BEFORE_JOIN
check MEMBERSHIP:JOIN_KEEPS_ABSENT fail "$USE|$RELEASE" '' '' -DMEMBERSHIP -DITER=1 -DJOIN_KEEPS_ABSENT
check MEMBERSHIP:LEAVE_ONLINE fail "$PARKED" '' '' -DMEMBERSHIP -DITER=1 -DLEAVE_ONLINE
check MEMBERSHIP,LEAVER=2:VALIDATE_BEFORE_JOIN fail "$USE|$RELEASE" '' '' -DMEMBERSHIP -DITER=1 -DLEAVER=2 -DVALIDATE_BEFORE_JOIN
check MEMBERSHIP,LEAVER=2:LEAVE_ONLINE fail "$PARKED" '' '' -DMEMBERSHIP -DITER=1 -DLEAVER=2 -DLEAVE_ONLINE
check DETACH:NO_RUN_PIN fail "$USE|$RELEASE" '' '' -DDETACH -DITER=1 -DNO_RUN_PIN
check DETACH:PEND_OR fail "$USE|$RELEASE" '' '' -DDETACH -DITER=1 -DPEND_OR
check DETACH:NO_RETIRE_AGAIN fail "$PARKED" '' '' -DDETACH -DITER=1 -DNO_RETIRE_AGAIN
check DETACH:NO_OFFLINE_FOR fail "$PARKED" '' '' -DDETACH -DITER=1 -DNO_OFFLINE_FOR
check DETACH:FOR_OFFLINE_LAST fail "$PARKED" '' '' -DDETACH -DITER=1 -DFOR_OFFLINE_LAST
# Disarming and re-arming a Stealing registration's level-triggered entry
# where two waiters meet on it: no readiness is ever left unreported.
model=disarm.pml
check disarm pass '' '' ''
check disarm,W=3 pass '' '' '' -DW=3
check disarm:NO_REARM fail "$LOST" '' '' -DNO_REARM
check disarm:UNCHECKED_DISARM fail "$LOST" '' '' -DUNCHECKED_DISARM
check disarm:UNLOCKED_DISARM fail "$LOST" '' '' -DUNLOCKED_DISARM
echo "total $((SECONDS - start))s"
if [ "$broken" != 0 ]; then
	echo "check.sh: an expectation is broken" >&2
	exit 1
fi
