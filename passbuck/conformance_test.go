package passbuck_test

import (
	"testing"

	"github.com/gracepoll/gracepoll/passbuck"
	"github.com/gracepoll/gracepoll/reclaim"
	"github.com/gracepoll/gracepoll/reclaim/reclaimtest"
)

func newMode(mode passbuck.Mode) reclaim.Factory {
	return func(n int) (reclaim.Reclaimer, error) { return passbuck.New(n, passbuck.Options{Mode: mode}) }
}

func TestConformanceSkipOffline(t *testing.T) {
	reclaimtest.Run(t, newMode(passbuck.SkipOffline))
}

func TestConformanceClassic(t *testing.T) {
	reclaimtest.Run(t, newMode(passbuck.Classic), reclaimtest.NeedsQuiesce())
}
