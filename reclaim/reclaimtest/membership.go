package reclaimtest

import (
	"errors"
	"fmt"
	"time"

	"github.com/gracepoll/gracepoll/reclaim"
)

// CheckMembership checks Leave and Join, in every mode (NeedsQuiesce
// included: a participant that left holds nothing up even there), with each
// participant in turn changing membership, the first and the last included:
//
//   - A participant that left is reported Left by Stats, a second Leave does
//     nothing, it does not hold grace periods up, and each remaining
//     participant still does. With every participant gone, a release runs
//     within a second with nobody calling anything.
//   - After Join it is no longer reported Left, and it holds up a release
//     retired after its Join until its next quiescent point.
//   - Releases that every participant before it has passed (parked on it, in
//     pass-the-buck) are passed on by its Leave: they still wait for the
//     participants after it, and then run; or, if Close comes first, Close
//     runs each of them exactly once.
func CheckMembership(newR reclaim.Factory, opts ...Option) error {
	var errs []error
	for _, n := range []int{1, 3} {
		for p := range n {
			if err := with(newR, n, func(r reclaim.Reclaimer) error { return leaveAndJoin(r, p) }); err != nil {
				errs = append(errs, fmt.Errorf("%d participants, participant %d leaving and joining: %w", n, p, err))
			}
		}
	}
	const n = 3
	if err := with(newR, n, allGone); err != nil {
		errs = append(errs, fmt.Errorf("%d participants, all leaving: %w", n, err))
	}
	for p := range n {
		for _, closeFirst := range []bool{false, true} {
			var prs []*probe
			err := with(newR, n, func(r reclaim.Reclaimer) (err error) {
				prs, err = leaveParked(r, p, closeFirst)
				return err
			})
			if closeFirst && err == nil {
				for _, pr := range prs {
					if err = pr.once(); err != nil {
						err = fmt.Errorf("release passed on by Leave and then pending at Close, by the time Close returned: %w", err)
						break
					}
				}
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("%d participants, participant %d leaving with releases parked on it (Close first: %v): %w", n, p, closeFirst, err))
			}
		}
	}
	return errors.Join(errs...)
}

// leftStats fails unless Stats reports exactly the participants in gone as
// Left.
func leftStats(r reclaim.Reclaimer, gone ...int) error {
	ps := r.Stats().Participants
	if len(ps) != r.Participants() {
		return fmt.Errorf("Stats().Participants has %d entries, want %d", len(ps), r.Participants())
	}
	want := make([]bool, len(ps))
	for _, p := range gone {
		want[p] = true
	}
	for p := range ps {
		if ps[p].Left != want[p] {
			return fmt.Errorf("with participants %v gone, Stats().Participants[%d].Left = %v", gone, p, ps[p].Left)
		}
	}
	return nil
}

func leaveAndJoin(r reclaim.Reclaimer, p int) error {
	n := r.Participants()
	r.Leave(p)
	r.Leave(p) // does nothing
	if err := leftStats(r, p); err != nil {
		return err
	}
	members := except(n, p)
	if len(members) == 0 {
		if err := runsAlone(r, "the only participant left"); err != nil {
			return err
		}
	}
	for _, hold := range members {
		if err := gracePeriodAmong(r, members, hold); err != nil {
			return fmt.Errorf("after Leave(%d): %w", p, err)
		}
	}
	r.Join(p)
	r.Join(p) // does nothing
	if err := leftStats(r); err != nil {
		return fmt.Errorf("after Join(%d): %w", p, err)
	}
	// The release is retired after Join, so p may hold a reference to what
	// it releases.
	if err := gracePeriodAmong(r, all(n), p); err != nil {
		return fmt.Errorf("after Join(%d): %w", p, err)
	}
	return nil
}

// runsAlone checks that a release runs with nobody calling anything.
func runsAlone(r reclaim.Reclaimer, why string) error {
	pr := newProbe()
	if err := r.Retire(pr.release); err != nil {
		return fmt.Errorf("Retire(release): %w", err)
	}
	if !pr.waitRun(soon) {
		return fmt.Errorf("with %s, release did not run within %v", why, soon)
	}
	return pr.once()
}

// allGone has every participant leave, then join again one at a time.
func allGone(r reclaim.Reclaimer) error {
	n := r.Participants()
	for p := range n {
		r.Leave(p)
	}
	if err := leftStats(r, all(n)...); err != nil {
		return err
	}
	if err := runsAlone(r, "every participant gone"); err != nil {
		return err
	}
	for p := range n {
		r.Join(p)
		if err := gracePeriodAmong(r, all(p+1), p); err != nil {
			return fmt.Errorf("after participants 0 to %d joined: %w", p, err)
		}
	}
	return nil
}

// leaveParked retires releases, lets every participant before p pass a
// quiescent point, so that in pass-the-buck they are parked on p, and has p
// leave. The participants after p still hold them up; once they quiesce the
// releases must run. With closeFirst it stops right after the Leave and
// returns the probes, for the caller to check after Close.
func leaveParked(r reclaim.Reclaimer, p int, closeFirst bool) ([]*probe, error) {
	n := r.Participants()
	prs := []*probe{newProbe(), newProbe(), newProbe()}
	for _, pr := range prs {
		if err := r.Retire(pr.release); err != nil {
			return nil, fmt.Errorf("Retire(release): %w", err)
		}
	}
	before, after := all(p), all(n)[p+1:]
	anyRun := func() bool {
		for _, pr := range prs {
			if pr.hasRun() {
				return true
			}
		}
		return false
	}
	// Participants before p keep quiescing, as busy ones would: it must not
	// matter.
	watch := func(what string) error {
		for end := time.Now().Add(notYet); time.Now().Before(end); time.Sleep(tick) {
			for _, q := range before {
				r.Quiesce(q)
			}
			if anyRun() {
				return errors.New(what)
			}
		}
		return nil
	}
	if err := watch(fmt.Sprintf("a release ran before participant %d passed a quiescent point", p)); err != nil {
		return nil, err
	}
	r.Leave(p)
	if closeFirst {
		return prs, nil
	}
	if len(after) > 0 {
		if err := watch(fmt.Sprintf("a release ran when participant %d left, before participants %v after it passed a quiescent point", p, after)); err != nil {
			return nil, err
		}
	}
	members := except(n, p)
	for deadline := time.Now().Add(eventually); ; time.Sleep(tick) {
		done := true
		for _, pr := range prs {
			done = done && pr.hasRun()
		}
		if done {
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("after participant %d left, releases parked on it did not all run within %v while participants %v kept quiescing", p, eventually, members)
		}
		for _, q := range members {
			r.Quiesce(q)
		}
	}
	var errs []error
	for _, pr := range prs {
		errs = append(errs, pr.once())
	}
	r.Join(p)
	return nil, errors.Join(errs...)
}
