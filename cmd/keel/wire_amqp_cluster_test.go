package main

import (
	"reflect"
	"strings"
	"testing"

	"github.com/keelmq/keel/internal/amqp"
	"github.com/keelmq/keel/internal/namesrv"
)

// TestAMQPPeers: the other groups' masters are the peers; a slave and the
// member's own group are not; a loopback door of a member on another
// host is unreachable, one on this member's host is not.
func TestAMQPPeers(t *testing.T) {
	ac := namesrv.AMQPCluster{Members: []namesrv.AMQPMember{
		{BrokerName: "a", BrokerID: 0, Addr: "10.0.0.1:10911", AMQPAddr: "127.0.0.1:5672"},
		{BrokerName: "b", BrokerID: 0, Addr: "10.0.0.1:11111", AMQPAddr: "127.0.0.1:5872"},
		{BrokerName: "b", BrokerID: 1, Addr: "10.0.0.1:11211", AMQPAddr: "127.0.0.1:5972"},
		{BrokerName: "c", BrokerID: 0, Addr: "10.0.0.2:10911", AMQPAddr: "127.0.0.1:5672"},
		{BrokerName: "d", BrokerID: 0, Addr: "10.0.0.3:10911", AMQPAddr: "10.0.0.3:5672"},
	}}
	ps := amqpPeers(ac, "a")
	if len(ps) != 3 || ps[2] != (amqp.Peer{Group: "d", Addr: "10.0.0.3:5672"}) || ps[0] != (amqp.Peer{Group: "b", Addr: "127.0.0.1:5872"}) {
		t.Fatalf("peers %+v", ps)
	}
	if ps[1].Group != "c" || !strings.Contains(ps[1].Unreachable, "loopback") || !strings.Contains(ps[1].Unreachable, "amqpListen") {
		t.Fatalf("c: %+v", ps[1])
	}
	if got := amqpPeers(namesrv.AMQPCluster{}, "a"); !reflect.DeepEqual(got, []amqp.Peer(nil)) {
		t.Fatalf("no members: %+v", got)
	}
}
