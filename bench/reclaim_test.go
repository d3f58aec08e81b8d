package bench

import (
	"testing"

	"github.com/gracepoll/gracepoll/passbuck"
	"github.com/gracepoll/gracepoll/reclaim"
	"github.com/gracepoll/gracepoll/reclaim/epoch"
	"github.com/gracepoll/gracepoll/reclaim/reclaimtest"
)

// BenchmarkReclaim measures every reclaimer with the same harness:
// QuiesceIdle, Retire, RetireParallel, GracePeriodOffline and
// GracePeriodQuiescing (see reclaimtest.Benchmark).
func BenchmarkReclaim(b *testing.B) {
	b.Run("passbuck", func(b *testing.B) {
		reclaimtest.Benchmark(b, func(n int) (reclaim.Reclaimer, error) {
			return passbuck.New(n, passbuck.Options{Mode: passbuck.SkipOffline})
		})
	})
	b.Run("passbuck-classic", func(b *testing.B) {
		reclaimtest.Benchmark(b, func(n int) (reclaim.Reclaimer, error) {
			return passbuck.New(n, passbuck.Options{Mode: passbuck.Classic})
		}, reclaimtest.NeedsQuiesce())
	})
	b.Run("epoch", func(b *testing.B) {
		reclaimtest.Benchmark(b, epoch.Factory(epoch.Options{}))
	})
}
