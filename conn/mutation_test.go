//go:build linux && gracepoll_mutation

package conn

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
)

// The mutation proof of the connection-level fd-reuse test
// (fdreuse_test.go): it runs against deliberately broken connection layers
// (build tag gracepoll_mutation, mutation_on.go) and must catch each one
// within a short run. A subtest passes when its mutant is caught; the
// control, the same build with no mutant switched on, must pass the test.
//
//	go test -tags gracepoll_mutation -run Mutation ./conn/
//
// Each run happens in a child process (this test binary, re-executed): a
// mutant closes or writes to fd numbers that are no longer its own, so it
// may leave fds, goroutines or broken sockets behind. The parent stays
// clean and parses the child's result line.

var connMutationBudget = flag.Duration("conn.mutation.budget", 10*time.Second,
	"TestConnMutationFDReuse: longest run allowed to catch one mutant")

const (
	connMutationChildEnv = "GRACEPOLL_CONN_MUTATION_CHILD"
	connMutationTLSEnv   = "GRACEPOLL_CONN_MUTATION_TLS" // the child's connections are TLS
)

var connMutants = []struct {
	name string
	m    int
	why  string
}{
	{"None", mutNone, "the layer as built (control: must pass)"},
	{"EarlyClose", mutEarlyClose, "the fd closed when the connection starts closing or ends, instead of by the poller after the grace period"},
	{"NoOpenCheck", mutNoOpenCheck, "a write that does not check the connection is still open"},
}

var connChildResult = regexp.MustCompile(`CONN-MUTATION-RESULT violations=(\d+) cycles=(\d+) took=(\S+)`)

// TestConnMutationFDReuse runs the fd-reuse test against each mutant, in a
// child process, until the first violation.
func TestConnMutationFDReuse(t *testing.T) {
	if os.Getenv(connMutationChildEnv) != "" {
		t.Skip("in a mutation child process")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, mu := range connMutants {
		for _, secure := range []bool{false, true} {
			name := mu.name
			if secure {
				name += "/TLS"
			}
			t.Run(name, func(t *testing.T) {
				budget := *connMutationBudget
				if mu.m == mutNone {
					budget = min(budget, 3*time.Second) // the control runs its whole budget
				}
				ctx, cancel := context.WithTimeout(context.Background(), budget+time.Minute)
				defer cancel()
				cmd := exec.CommandContext(ctx, exe, "-test.run=^TestConnMutationChild$", "-test.v", "-test.count=1",
					"-test.timeout="+(budget+50*time.Second).String(),
					"-conn.mutation.budget="+budget.String())
				cmd.Env = append(os.Environ(), connMutationChildEnv+"="+mu.name)
				if secure {
					cmd.Env = append(cmd.Env, connMutationTLSEnv+"=1")
				}
				out, _ := cmd.CombinedOutput() // a mutant's child may fail its own checks too
				text := string(out)
				m := connChildResult.FindStringSubmatch(text)
				if m == nil {
					t.Fatalf("child for %s ended without a result:\n%s", mu.name, connTail(text, 40))
				}
				n, _ := strconv.Atoi(m[1])
				var first string
				if i := strings.Index(text, "CONN-MUTATION-FIRST: "); i >= 0 {
					first, _, _ = strings.Cut(text[i+len("CONN-MUTATION-FIRST: "):], "\n")
				}
				switch {
				case mu.m == mutNone && n == 0:
					t.Logf("control: no violation in %s cycles (%s)", m[2], m[3])
				case mu.m == mutNone:
					t.Errorf("control (no mutant) failed the fd-reuse test with %d violations in %s cycles; the first: %s", n, m[2], first)
				case n > 0:
					t.Logf("mutant %s caught after %s cycles in %s with %d violations; the first: %s", mu.name, m[2], m[3], n, first)
				default:
					t.Errorf("mutant %s (%s) survived the fd-reuse test for %s cycles in %s", mu.name, mu.why, m[2], m[3])
				}
			})
		}
	}
}

func connTail(s string, n int) string {
	lines := strings.Split(s, "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// TestConnMutationChild is the child process's side: it switches one
// mutant on, runs the fd-reuse test until the first violation or the
// budget, and prints the result for the parent.
func TestConnMutationChild(t *testing.T) {
	name := os.Getenv(connMutationChildEnv)
	if name == "" {
		t.Skip("run by TestConnMutationFDReuse")
	}
	m := -1
	for _, mu := range connMutants {
		if mu.name == name {
			m = mu.m
		}
	}
	if m < 0 {
		t.Fatalf("unknown mutant %q", name)
	}
	mutation = m // before the server starts: its goroutines see it
	defer func() { mutation = mutNone }()
	start := time.Now()
	res := runConnFDReuse(t, 1<<30, fdrLanes, true, *connMutationBudget, os.Getenv(connMutationTLSEnv) != "")
	res.summary(t, time.Since(start))
	fmt.Printf("CONN-MUTATION-RESULT violations=%d cycles=%d took=%v\n", res.viol.Count(), res.cycles.Load(), time.Since(start).Round(time.Millisecond))
	if res.viol.Count() > 0 {
		first, _, _ := strings.Cut(strings.TrimPrefix(res.viol.String(), "\t"), "\n")
		fmt.Printf("CONN-MUTATION-FIRST: %s\n", first)
	}
}
