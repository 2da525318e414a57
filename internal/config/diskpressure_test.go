package config

import (
	"strings"
	"testing"
)

// RocketMQ's switch for forced cleaning points at diskPressureDelete, and
// diskPressureDelete takes only its three values.
func TestDiskPressureDeleteKey(t *testing.T) {
	if h := hint("cleanFileForciblyEnable"); !strings.Contains(h, "diskPressureDelete") {
		t.Fatalf("hint for cleanFileForciblyEnable: %q", h)
	}
	b := Default()
	if err := b.Set("diskPressureDelete", "always"); err == nil {
		t.Fatal("diskPressureDelete=always accepted")
	}
	for _, v := range []DiskPressureDelete{PressureDeleteExpired, PressureDeleteConsumed, PressureDeleteUnconsumed} {
		if err := b.Set("diskPressureDelete", string(v)); err != nil || b.DiskPressureDelete != v {
			t.Fatalf("diskPressureDelete=%s: %v (%s)", v, err, b.DiskPressureDelete)
		}
	}
}
