//go:build linux && gracepoll_mutation

package poller_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gracepoll/gracepoll/poller"
)

// The mutation proof: the torture and the fd-reuse test run against
// deliberately broken pollers (build tag gracepoll_mutation) and must catch
// each one within a short run. A test here passes when its mutant is
// caught.
//
//	go test -tags gracepoll_mutation -run Mutation ./poller/
//
// Each run happens in a child process (this test binary, re-executed): a
// mutant breaks the poller's own memory safety, so it may leave goroutines
// or fds behind, and under -race the race detector reports its data races
// and fails the process. Either way the parent stays clean; it counts the
// child's violations, and under -race also a race report, as the catch.

var mutationBudget = flag.Duration("mutation.budget", 10*time.Second,
	"TestMutation*: longest run allowed to catch one mutant in one topology")

const mutationChildEnv = "GRACEPOLL_MUTATION_CHILD"

var mutants = []struct {
	name string
	m    int
	why  string
	// growth: a bug in the hand-off, the growth of waiters or the
	// detaching of a stuck one, which only a shared set has.
	growth bool
	// pinned: a bug that a handler on a shared set cannot see, as there
	// the running bit pins every dispatch, taken by the CAS that
	// validates it (slot.enterRun), whatever the grace period does. The
	// fd-reuse test, which sees only what handlers see, runs it on
	// per-waiter sets alone; the torture catches it on shared sets
	// through Barrier, which must not return before such a release.
	pinned bool
}{
	{"NoGrace", poller.MutNoGrace, "release without a grace period", false, true},
	{"TwoLoads", poller.MutTwoLoads, "validation with two loads (generation, then state)", false, false},
	{"NoValidate", poller.MutNoValidate, "skipping offline waiters without validating events after Online", false, false},
	{"NoRunPin", poller.MutNoRunPin, "a release that ignores the running bit of a detached waiter's handler", true, false},
}

// TestMutationTorture runs the torture against each mutant, in both
// topologies, until the first violation: it must come within the budget.
func TestMutationTorture(t *testing.T) { runMutants(t, "torture") }

// TestMutationFDReuse runs the fd-reuse security test against each
// mutant, in both topologies, until the first violation.
func TestMutationFDReuse(t *testing.T) { runMutants(t, "fdreuse") }

func runMutants(t *testing.T, test string) {
	if os.Getenv(mutationChildEnv) != "" {
		t.Skip("in a mutation child process")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, mu := range mutants {
		if mu.growth && test == "fdreuse" {
			// The fd-reuse test's handlers never block, so no batch is
			// handed off and no waiter starts: only the torture can catch
			// these.
			continue
		}
		t.Run(mu.name, func(t *testing.T) {
			for _, topo := range topologies {
				if mu.growth && topo == poller.PerWaiter || mu.pinned && test == "fdreuse" && topo != poller.PerWaiter {
					continue
				}
				t.Run(topo.String(), func(t *testing.T) {
					runMutantChild(t, exe, test, mu.name, mu.why, topo)
				})
			}
		})
	}
}

var childResult = regexp.MustCompile(`MUTATION-RESULT violations=(\d+) took=(\S+)`)

func runMutantChild(t *testing.T, exe, test, mutant, why string, topo poller.Topology) {
	ctx, cancel := context.WithTimeout(context.Background(), *mutationBudget+time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe, "-test.run=^TestMutationChild$", "-test.v", "-test.count=1",
		"-test.timeout="+(*mutationBudget+50*time.Second).String(),
		"-mutation.budget="+mutationBudget.String())
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s:%s:%d", mutationChildEnv, test, mutant, int(topo)))
	out, _ := cmd.CombinedOutput() // the child fails when the race detector or goleak catches the mutant
	text := string(out)
	raced := strings.Contains(text, "WARNING: DATA RACE")
	m := childResult.FindStringSubmatch(text)
	if m == nil {
		if raced {
			t.Logf("mutant %s caught in %s by the race detector (the child ended before its report)", mutant, topo)
			return
		}
		if i := strings.Index(text, "inconsistent slot state"); i >= 0 {
			// The slot word's own check (slot.go) found a transition the
			// protocol forbids, such as a run ending on a freed slot, and
			// stopped the process rather than go on corrupted.
			t.Logf("mutant %s caught in %s by the slot word's consistency check: %s", mutant, topo, firstLines([]byte(text[i:]), 1))
			return
		}
		t.Fatalf("mutant %s child for %s ended without a result:\n%s", mutant, topo, tail(text, 40))
	}
	n, _ := strconv.Atoi(m[1])
	var first string
	if i := strings.Index(text, "MUTATION-FIRST"); i >= 0 {
		first = firstLines([]byte(text[i:]), 4)
	}
	switch {
	case n > 0 && raced:
		t.Logf("mutant %s caught by %s in %s in %s with %d violations, and by the race detector; %s", mutant, test, topo, m[2], n, first)
	case n > 0:
		t.Logf("mutant %s caught by %s in %s in %s with %d violations; %s", mutant, test, topo, m[2], n, first)
	case raced:
		t.Logf("mutant %s caught in %s by the race detector only (%s: no violation in %s)", mutant, topo, test, m[2])
	default:
		t.Errorf("mutant %s (%s) survived %s for %s in %s", mutant, why, test, m[2], topo)
	}
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// TestMutationChild is the child process's side: it runs one mutant under
// one test and prints the result for the parent.
func TestMutationChild(t *testing.T) {
	spec := os.Getenv(mutationChildEnv)
	if spec == "" {
		t.Skip("run by TestMutationTorture and TestMutationFDReuse")
	}
	parts := strings.Split(spec, ":")
	if len(parts) != 3 {
		t.Fatalf("bad %s=%q", mutationChildEnv, spec)
	}
	test, name := parts[0], parts[1]
	ti, _ := strconv.Atoi(parts[2])
	topo := poller.Topology(ti)
	m, growth := -1, false
	for _, mu := range mutants {
		if mu.name == name {
			m, growth = mu.m, mu.growth
		}
	}
	if m < 0 {
		t.Fatalf("unknown mutant %q", name)
	}
	poller.SetMutation(m)
	defer poller.SetMutation(poller.MutNone)
	start := time.Now()
	var n int64
	var first string
	switch test {
	case "torture":
		cfg := tortureConfig{
			topo: topo, rk: passBuck, duration: *mutationBudget,
			seed: uint64(time.Now().UnixNano()), stopEarly: true, mutant: true,
			// Few lanes: slots and fd numbers are reused at once; many
			// waiters: events are in flight on waiters gone offline.
			lanes: 3, waiters: 6, maxRound: 300 * time.Millisecond,
		}
		if growth {
			// Fewer waiters than lanes, so that all of them block and
			// extra ones start; classic pass-the-buck, where a
			// participant that has not joined is skipped even while
			// online (SkipOffline takes Online as a join).
			cfg.lanes, cfg.waiters, cfg.rk = 8, 2, passBuckClassic
			if topo == poller.Stealing {
				// One set for every lane: a stand-in, which ends as soon
				// as the waiter it stood in for is free, then has the
				// most to do while it runs.
				cfg.waiters = 1
			}
		}
		res := runTorture(t, cfg)
		res.summary(t, "mutant "+name+" "+topo.String())
		n, first = res.viol.Count(), res.viol.String()
	case "fdreuse":
		res := runFDReuse(t, optsFor(topo, passBuck, 4), 1<<30, 4, true, *mutationBudget)
		res.summary(t, "mutant "+name+" "+topo.String())
		n, first = res.viol.Count(), res.viol.String()
	default:
		t.Fatalf("unknown test %q", test)
	}
	fmt.Printf("MUTATION-RESULT violations=%d took=%v\n", n, time.Since(start).Round(time.Millisecond))
	if n > 0 {
		fmt.Printf("MUTATION-FIRST: %s\n", strings.TrimPrefix(first, "\t"))
	}
}

// TestMutationLiveness: a run that forgets to re-arm an entry another
// waiter disarmed (Stealing) loses the registration's later events, and
// TestStealingLiveness's scenario sees writes never read. The poller stays
// memory-safe, so this runs in the test's own process.
func TestMutationLiveness(t *testing.T) {
	if os.Getenv(mutationChildEnv) != "" {
		t.Skip("in a mutation child process")
	}
	poller.SetMutation(poller.MutNoRearm)
	// A cleanup, registered before the poller's: it runs after Close.
	t.Cleanup(func() { poller.SetMutation(poller.MutNone) })
	lost, st := stealingLiveness(t, 400*time.Millisecond)
	if lost == 0 {
		t.Errorf("mutant NoRearm survived: every write was read (%d disarms)", st.Disarms)
	}
	t.Logf("mutant NoRearm caught: %d writes never read after %d disarms", lost, st.Disarms)
}
