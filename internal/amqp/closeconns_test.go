package amqp

import (
	"testing"
	"time"

	"github.com/keelmq/keel/internal/amqp/wire"
	amqp091 "github.com/rabbitmq/amqp091-go"
)

// TestCloseConnectionsForced: CloseConnections tells every open
// connection why it ends (connection.close with the code and reason)
// before Close closes the sockets.
func TestCloseConnectionsForced(t *testing.T) {
	b := startBroker(t)
	var closed []chan *amqp091.Error
	for i := 0; i < 2; i++ {
		c, err := amqp091.Dial("amqp://guest:guest@" + b.addr + "/")
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		closed = append(closed, c.NotifyClose(make(chan *amqp091.Error, 1)))
	}
	b.srv.CloseConnections(wire.ConnectionForced, "CONNECTION_FORCED - replaced")
	for i, ch := range closed {
		select {
		case e := <-ch:
			if e == nil || e.Code != 320 || !e.Server || e.Reason != "CONNECTION_FORCED - replaced" {
				t.Errorf("connection %d: %v, want 320 from the server with the reason", i, e)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("connection %d: no connection.close", i)
		}
	}
}
