//go:build race

package lease_test

// raceEnabled: the race detector slows the simulation about tenfold.
const raceEnabled = true
