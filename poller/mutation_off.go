//go:build !gracepoll_mutation

package poller

import "github.com/gracepoll/gracepoll/reclaim"

func testHookValidate(_ *slot, _ uint32, v state, ok bool) (state, bool) { return v, ok }

func testHookReclaimer(r reclaim.Reclaimer) reclaim.Reclaimer { return r }
