//go:build !race

package vsr_test

const raceEnabled = false
