package main

import (
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestControlledMasterServesAMQPManagement: a broker in controller mode
// opens its AMQP management listener (amqpManagementListen) once elected
// master, as a plain master does; a group of one member, under a
// controller of one voter.
func TestControlledMasterServesAMQPManagement(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two processes")
	}
	ports := reserveLoopbackPorts(t, 6)
	ctrl, brokerAddr, haAddr, amqpAddr, mgmtAddr, nsAddr := ports[0], ports[1], ports[2], ports[3], ports[4], ports[5]
	dir := t.TempDir()
	cconf := filepath.Join(dir, "controller.conf")
	if err := os.WriteFile(cconf, []byte("controllerHeartBeatTimeoutMills=1000\nscanInactiveMasterInterval=100\ncontrollerFenceTimeoutMillis=500\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	startControllerProc(t, t.TempDir(), ctrl, "-c", cconf, "--bootstrap="+ctrl)
	startKeelProc(t, "namesrv", "--namesrv-listen", nsAddr)
	bconf := filepath.Join(dir, "broker.conf")
	if err := os.WriteFile(bconf, []byte("brokerClusterName=C\nbrokerName=broker-m\nbrokerRole=SYNC_MASTER\nminInSyncReplicas=1\n"+
		"enableControllerMode=true\ncontrollerAddr="+ctrl+"\nhttpListen=\nkafkaListen=\nbrokerIP1=127.0.0.1\n"+
		"amqpListen="+amqpAddr+"\namqpManagementListen="+mgmtAddr+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	b := startKeelProc(t, "broker", "-c", bconf, "--data-dir", t.TempDir(), "-n", nsAddr, "--broker-listen", brokerAddr, "--ha-listen", haAddr)
	cl := &http.Client{Timeout: 2 * time.Second}
	status := 0
	waitFor(t, "the elected master's AMQP management API", 30*time.Second, func() bool {
		req, _ := http.NewRequest("GET", "http://"+mgmtAddr+"/api/overview", nil)
		req.SetBasicAuth("guest", "guest")
		resp, err := cl.Do(req)
		if err != nil {
			return false
		}
		resp.Body.Close()
		status = resp.StatusCode
		return true
	})
	if status != http.StatusOK {
		t.Fatalf("GET /api/overview: %d; broker log:\n%s", status, b.logs.String())
	}
}
