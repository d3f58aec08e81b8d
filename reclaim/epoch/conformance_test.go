package epoch_test

import (
	"testing"

	"github.com/gracepoll/gracepoll/reclaim/epoch"
	"github.com/gracepoll/gracepoll/reclaim/reclaimtest"
)

func TestConformance(t *testing.T) {
	reclaimtest.Run(t, epoch.Factory(epoch.Options{}))
}
