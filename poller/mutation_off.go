//go:build !gracepoll_mutation

package poller

// The test hooks of a normal build: identities the compiler inlines away.
// mutation_on.go, built only for the mutation tests, makes them bugs.

import "github.com/gracepoll/gracepoll/reclaim"

func testHookValidate(_ *slot, _ uint32, v state, ok bool) (state, bool) { return v, ok }

func testHookReclaimer(r reclaim.Reclaimer) reclaim.Reclaimer { return r }

func testHookPinned(running bool) bool { return running }

func testHookRearm(disarmed bool) bool { return disarmed }

func testHookWoken() {}
