package heapwatch

import "testing"

// TestWatchSeesAnAllocation: a peak taken over an allocation of 64 MiB
// that stays live until the peak is read is at least that size.
func TestWatchSeesAnAllocation(t *testing.T) {
	before := Now()
	stop := Watch()
	b := make([]byte, 64<<20)
	for i := range b {
		b[i] = byte(i)
	}
	waitSample := Objects()
	peak := stop()
	if peak < before+64<<20 || waitSample < 64<<20 {
		t.Fatalf("peak %d, before %d, sample %d: the 64 MiB allocation was not seen", peak, before, waitSample)
	}
	_ = b[len(b)-1]
}
