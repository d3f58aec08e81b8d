package poller

// Deliberate bugs for the mutation tests, which prove that the torture and
// fd-reuse tests catch each one. A normal build has the constant mutNone
// (mutation_off.go), so every hook below is dead code the compiler drops;
// only a build with the tag gracepoll_mutation (mutation_on.go), used by
// tests alone, can switch one on.
const (
	mutNone       = iota
	mutNoGrace    // release at once, without a grace period
	mutTwoLoads   // validate with two loads: generation, then state
	mutNoValidate // skip offline waiters but trust events after Online
)
