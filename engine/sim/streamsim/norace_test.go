//go:build !race

package streamsim

const raceEnabled = false
