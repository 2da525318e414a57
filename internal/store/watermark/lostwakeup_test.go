package watermark

import (
	"sync"
	"sync/atomic"
	"testing"
)

// A waiter that registers while the owner advances past its offset is
// answered by one of the two: the owner's Release if Advance saw the
// waiter, else the registration itself, which looks at the offset again
// after registering. Before that second look, a registration that checked
// the offset just before the Advance and published itself just after the
// owner looked for waiters was lost until some later Release (a dispatcher
// with nothing more to dispatch never made one).
func TestRegistrationRacingAdvanceIsNeverLost(t *testing.T) {
	const rounds = 20000
	m := New("test", nil)
	for i := int64(0); i < rounds; i++ {
		var called atomic.Bool
		var wg sync.WaitGroup
		wg.Add(2)
		go func() {
			defer wg.Done()
			m.Notify(i+1, 0, func(err error) {
				if err != nil {
					t.Errorf("round %d: %v", i, err)
				}
				called.Store(true)
			})
		}()
		go func() {
			defer wg.Done()
			if m.Advance(i + 1) {
				m.Release()
			}
		}()
		wg.Wait()
		if !called.Load() {
			t.Fatalf("round %d: a waiter for an offset the Mark reached was never called back", i)
		}
	}
}
