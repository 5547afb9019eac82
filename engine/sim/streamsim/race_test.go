//go:build race

package streamsim

// raceEnabled: the race detector is on. The simulator runs on one goroutine, so the race pass of
// scripts/test runs a few of its seeds (seedRange) and skips the variant hunts and the long scripted
// loops; the plain pass runs them all.
const raceEnabled = true
