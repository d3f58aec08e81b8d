//go:build gracepoll_mutation

package poller

// Deliberate bugs for the mutation tests, which prove that the torture and
// fd-reuse tests catch each one. Production code calls the test hooks in
// one line each (testHookValidate, testHookReclaimer); a normal build
// (mutation_off.go) makes them identity functions the compiler inlines
// away, and only this build, with the tag gracepoll_mutation, used by tests
// alone, can switch a bug on.

import (
	"runtime"

	"github.com/gracepoll/gracepoll/reclaim"
)

const (
	mutNone       = iota
	mutNoGrace    // release at once, without a grace period (testHookReclaimer)
	mutTwoLoads   // validate with two loads: generation, then state (testHookValidate)
	mutNoValidate // skip offline waiters but trust events after Online (testHookValidate)
	mutNoRunPin   // the release ignores the running bit of a detached waiter's handler (testHookPinned)
	mutNoRearm    // a run that ends never re-arms a disarmed entry (testHookRearm)
)

// mutation is set by tests (export_mutation_test.go) before New.
var mutation = mutNone

// testHookValidate replaces the validating load's verdict.
func testHookValidate(s *slot, gen uint32, v state, ok bool) (state, bool) {
	switch mutation {
	case mutTwoLoads:
		g := v.gen()
		runtime.Gosched() // widen the window the second load opens
		v = s.load()
		return v, g == gen && v.life() == lifeActive
	case mutNoValidate:
		return v, true
	}
	return v, ok
}

// testHookReclaimer wraps the reclaimer in one that skips the grace period.
func testHookReclaimer(r reclaim.Reclaimer) reclaim.Reclaimer {
	if mutation == mutNoGrace {
		return noGrace{r}
	}
	return r
}

type noGrace struct{ reclaim.Reclaimer }

func (n noGrace) Retire(release func()) error {
	go release()
	return nil
}

// testHookPinned, in the mutant, tells the release that no handler runs
// the registration: a waiter the monitor detached is then treated as if it
// held nothing, and the registration its handler still runs is freed
// under it.
func testHookPinned(running bool) bool { return running && mutation != mutNoRunPin }

// testHookRearm, in the mutant, forgets that another waiter disarmed the
// registration's entry while it ran: the entry stays one-shot, and after
// its one more report the registration hears nothing again.
func testHookRearm(disarmed bool) bool { return disarmed && mutation != mutNoRearm }

// testHookWoken, with any mutant on, lets other goroutines run between a
// waiter's taking events offline and its Online, as the scheduler may at
// any time (a preemption, a busy CPU): the window in which a release that
// skipped the waiter completes while it holds events, which validation
// after Online must close.
func testHookWoken() {
	if mutation != mutNone {
		runtime.Gosched()
	}
}
