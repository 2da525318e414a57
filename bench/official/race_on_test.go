//go:build race

package official

const raceEnabled = true
