package config

import (
	"strings"
	"testing"
)

// TestControllerModeValidation: enableControllerMode needs controllerAddr
// of host:port entries and a master role (SYNC_MASTER or ASYNC_MASTER),
// and takes no haMasterAddress.
func TestControllerModeValidation(t *testing.T) {
	for _, tt := range []struct {
		set  map[string]string
		want string // "" = valid
	}{
		{map[string]string{"brokerRole": "SYNC_MASTER", "controllerAddr": "127.0.0.1:9878;127.0.0.1:9879"}, ""},
		{map[string]string{"brokerRole": "SYNC_MASTER"}, "controllerAddr"},
		{map[string]string{"brokerRole": "SYNC_MASTER", "controllerAddr": "nohostport"}, `"nohostport" is not host:port`},
		// An ASYNC_MASTER acknowledges under the controllers' lease.
		{map[string]string{"brokerRole": "ASYNC_MASTER", "controllerAddr": "127.0.0.1:9878;127.0.0.1:9879"}, ""},
		{map[string]string{"brokerRole": "SLAVE", "brokerId": "1", "controllerAddr": "127.0.0.1:9878"}, "not SLAVE"},
		{map[string]string{"brokerRole": "SYNC_MASTER", "controllerAddr": "127.0.0.1:9878", "haMasterAddress": "127.0.0.1:10912"}, "haMasterAddress"},
	} {
		b := Default()
		if err := b.Set("enableControllerMode", "true"); err != nil {
			t.Fatal(err)
		}
		for k, v := range tt.set {
			if err := b.Set(k, v); err != nil {
				t.Fatal(err)
			}
		}
		err := b.Validate()
		if tt.want == "" {
			if err != nil {
				t.Errorf("%v: %v", tt.set, err)
			}
			if got := b.ControllerAddrs(); len(got) != 2 {
				t.Errorf("ControllerAddrs %v", got)
			}
		} else if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: %v, want %q", tt.set, err, tt.want)
		}
	}
}
