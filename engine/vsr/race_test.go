//go:build race

package vsr_test

// raceEnabled: the race detector is on. The simulator runs on one goroutine, so the race pass of
// scripts/test runs only a few of its seeds; the plain pass runs them all.
const raceEnabled = true
