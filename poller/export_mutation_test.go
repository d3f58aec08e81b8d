//go:build gracepoll_mutation

package poller

// Mutation names for SetMutation.
const (
	MutNone       = mutNone
	MutNoGrace    = mutNoGrace
	MutTwoLoads   = mutTwoLoads
	MutNoValidate = mutNoValidate
	MutNoRunPin   = mutNoRunPin
	MutNoRearm    = mutNoRearm
)

// SetMutation switches a deliberate bug on (or off with MutNone) for
// pollers made afterwards. Not safe while a poller runs.
func SetMutation(m int) { mutation = m }
