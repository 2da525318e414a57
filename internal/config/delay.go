package config

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// MaxDelayLevels bounds the number of levels in messageDelayLevel.
const MaxDelayLevels = 1000

// maxDelay bounds one delay level.
const maxDelay = 365 * 24 * time.Hour

var delayUnits = map[byte]time.Duration{
	's': time.Second,
	'm': time.Minute,
	'h': time.Hour,
	'd': 24 * time.Hour,
}

// ParseDelayLevels parses a messageDelayLevel value: whitespace-separated
// positive integers, each followed by one unit letter s, m, h or d (RocketMQ's
// syntax, e.g. "1s 5s 10s 30s 1m ... 2h"). Level n (1-based, as clients send
// it) is element n-1 of the result.
func ParseDelayLevels(s string) ([]time.Duration, error) {
	words := strings.Fields(s)
	if len(words) == 0 {
		return nil, errors.New("config: messageDelayLevel: no levels")
	}
	if len(words) > MaxDelayLevels {
		return nil, fmt.Errorf("config: messageDelayLevel: %d levels, at most %d", len(words), MaxDelayLevels)
	}
	levels := make([]time.Duration, len(words))
	for i, w := range words {
		d, err := parseDelay(w)
		if err != nil {
			return nil, fmt.Errorf("config: messageDelayLevel: level %d %q: %w", i+1, w, err)
		}
		levels[i] = d
	}
	return levels, nil
}

func parseDelay(w string) (time.Duration, error) {
	unit, ok := delayUnits[w[len(w)-1]]
	if !ok {
		return 0, errors.New("must end in a unit s, m, h or d")
	}
	digits := w[:len(w)-1]
	if digits == "" || strings.TrimLeft(digits, "0123456789") != "" {
		return 0, errors.New("must be a positive integer followed by a unit")
	}
	n, err := strconv.ParseInt(digits, 10, 64)
	if err != nil || n > int64(maxDelay/unit) {
		return 0, fmt.Errorf("longer than %v", maxDelay)
	}
	if n == 0 {
		return 0, errors.New("must be positive")
	}
	return time.Duration(n) * unit, nil
}
