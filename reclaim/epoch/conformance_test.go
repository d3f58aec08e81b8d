package epoch_test

import (
	"testing"

	"github.com/gracepoll/gracepoll/reclaim"
	"github.com/gracepoll/gracepoll/reclaim/epoch"
	"github.com/gracepoll/gracepoll/reclaim/reclaimtest"
)

func TestConformance(t *testing.T) {
	reclaimtest.Run(t, func(n int) (reclaim.Reclaimer, error) { return epoch.New(n) })
}
