//go:build race

package ws_test

// autobahnRace reports the race detector, which makes the heavy groups
// (9, 12, 13) repeat their messages fewer times.
const autobahnRace = true
