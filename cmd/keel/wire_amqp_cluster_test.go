package main

import (
	"crypto/tls"
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
	plain := amqpCluster{}.door
	ps := amqpPeers(ac, "a", plain)
	if len(ps) != 3 || ps[2] != (amqp.Peer{Group: "d", Addr: "10.0.0.3:5672"}) || ps[0] != (amqp.Peer{Group: "b", Addr: "127.0.0.1:5872"}) {
		t.Fatalf("peers %+v", ps)
	}
	if ps[1].Group != "c" || !strings.Contains(ps[1].Unreachable, "loopback") || !strings.Contains(ps[1].Unreachable, "amqpListen") {
		t.Fatalf("c: %+v", ps[1])
	}
	if got := amqpPeers(namesrv.AMQPCluster{}, "a", plain); !reflect.DeepEqual(got, []amqp.Peer(nil)) {
		t.Fatalf("no members: %+v", got)
	}
}

// TestAMQPPeerDoors: a door with an amqps listener only is dialled there
// over TLS whatever this member prefers; one with both listeners on its
// amqps one when this member prefers TLS (tlsEnable, tlsMode=enforcing),
// else on its plain one.
func TestAMQPPeerDoors(t *testing.T) {
	ac := namesrv.AMQPCluster{Members: []namesrv.AMQPMember{
		{BrokerName: "b", Addr: "10.0.0.2:10911", AMQPAddr: "10.0.0.2:5672", AMQPSAddr: "10.0.0.2:5671"},
		{BrokerName: "c", Addr: "10.0.0.3:10911", AMQPSAddr: "10.0.0.3:5671"},
		{BrokerName: "d", Addr: "10.0.0.4:10911", AMQPAddr: "10.0.0.4:5672"},
	}}
	tc := &tls.Config{}
	for _, prefer := range []bool{false, true} {
		ps := amqpPeers(ac, "a", amqpCluster{tls: tc, preferTLS: prefer}.door)
		want := []amqp.Peer{{Group: "b", Addr: "10.0.0.2:5672"}, {Group: "c", Addr: "10.0.0.3:5671", TLS: tc}, {Group: "d", Addr: "10.0.0.4:5672"}}
		if prefer {
			want[0] = amqp.Peer{Group: "b", Addr: "10.0.0.2:5671", TLS: tc}
		}
		if !reflect.DeepEqual(ps, want) {
			t.Errorf("prefer TLS %t: peers\n got %+v\nwant %+v", prefer, ps, want)
		}
	}
	ac = namesrv.AMQPCluster{Members: []namesrv.AMQPMember{
		{BrokerName: "a", Addr: "10.0.0.1:10911", AMQPSAddr: "127.0.0.1:5671"},
		{BrokerName: "c", Addr: "10.0.0.3:10911", AMQPSAddr: "127.0.0.1:5671"},
	}}
	ps := amqpPeers(ac, "a", amqpCluster{tls: tc}.door)
	if len(ps) != 1 || !strings.Contains(ps[0].Unreachable, "amqpsListen") {
		t.Fatalf("a loopback amqps door on another host: %+v", ps)
	}
}
