package poller

// Deliberate bugs for the mutation tests, which prove that the torture and
// fd-reuse tests catch each one. Production code calls the test hooks
// below in one line each; a normal build (mutation_off.go) makes them
// identity functions the compiler inlines away, and only a build with the
// tag gracepoll_mutation (mutation_on.go), used by tests alone, can switch
// a bug on.
