//go:build !race

package mongotest_test

const raceEnabled = false
