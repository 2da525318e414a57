package broker

import (
	"strings"
	"testing"

	"github.com/keelmq/keel/internal/remoting"
)

// TestPullSuggestsSlaveToSlowConsumers: with slaveReadEnable a pull that
// reads further behind the log end than SlaveReadBehindBytes is told to
// go to the group's whichBrokerWhenConsumeSlowly (1), a pull near the end
// to the group's brokerId (0); without it every pull is told 0.
func TestPullSuggestsSlaveToSlowConsumers(t *testing.T) {
	for _, enable := range []bool{true, false} {
		e := startEnv(t, func(c *Config) { c.SlaveReadEnable, c.SlaveReadBehindBytes = enable, 4<<10 })
		cl := e.dial()
		body := []byte(strings.Repeat("x", 1000))
		for range 20 {
			wantCode(t, cl.sendV1("T", 0, "", body), remoting.ResSuccess)
		}
		e.waitMax("T", 0, 20)
		wantCode(t, cl.heartbeat("c1", "g", "T", "*", "CLUSTERING"), remoting.ResSuccess)
		suggest := func(offset int64) string {
			ext := pullExt("g", "T", 0, offset, 0, 0)
			ext["maxMsgNums"] = "1"
			resp := cl.invoke(remoting.ReqPullMessage, ext, nil)
			wantCode(t, resp, remoting.ResSuccess)
			return resp.ExtFields["suggestWhichBrokerId"]
		}
		far, near := suggest(0), suggest(19)
		switch {
		case enable && (far != "1" || near != "0"):
			t.Errorf("slaveReadEnable: suggested %s far behind, %s near the end; want 1, 0", far, near)
		case !enable && (far != "0" || near != "0"):
			t.Errorf("slaveReadEnable off: suggested %s, %s; want 0, 0", far, near)
		}
		e.shutdown()
	}
}
