package config

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestParseDelayLevels(t *testing.T) {
	tests := []struct {
		in   string
		want []time.Duration
	}{
		{"1s", []time.Duration{time.Second}},
		{" 1s\t5m  2h 3d ", []time.Duration{time.Second, 5 * time.Minute, 2 * time.Hour, 72 * time.Hour}},
		{"0010s", []time.Duration{10 * time.Second}},
		{"365d", []time.Duration{365 * 24 * time.Hour}},
	}
	for _, tt := range tests {
		got, err := ParseDelayLevels(tt.in)
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("ParseDelayLevels(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
}

func TestParseDelayLevelsErrors(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", "no levels"},
		{"   ", "no levels"},
		{"1", "must end in a unit"},
		{"1ms", "must be a positive integer"},
		{"s", "must be a positive integer"},
		{"-1s", "must be a positive integer"},
		{"+1s", "must be a positive integer"},
		{"1.5s", "must be a positive integer"},
		{"0s", "must be positive"},
		{"366d", "longer than"},
		{"99999999999999999999999s", "longer than"},
		{"1s 2x", `level 2 "2x"`},
		{strings.Repeat("1s ", MaxDelayLevels+1), "at most"},
	}
	for _, tt := range tests {
		_, err := ParseDelayLevels(tt.in)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ParseDelayLevels(%.30q) = %v, want error containing %q", tt.in, err, tt.want)
		}
	}
}
