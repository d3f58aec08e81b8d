package reclaimtest_test

import (
	"testing"

	"github.com/gracepoll/gracepoll/reclaim/reclaimtest"
)

func BenchmarkReference(b *testing.B) {
	reclaimtest.Benchmark(b, newRef)
}

func BenchmarkReferenceClassic(b *testing.B) {
	reclaimtest.Benchmark(b, newClassic, reclaimtest.NeedsQuiesce())
}
