//go:build !race

package official

const raceEnabled = false
