//go:build race

package mongotest_test

// raceEnabled skips the speed test under the race detector, which slows
// the driver and the server many times over.
const raceEnabled = true
