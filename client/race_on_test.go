//go:build race

package client

// raceEnabled: the race detector instruments allocations and reshuffles the runtime's own timer
// bookkeeping, so allocation counts are not meaningful under it.
const raceEnabled = true
