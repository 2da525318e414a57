package amqp

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/keelmq/keel/internal/acl"
)

// rotatingRules is a member's plain_acl.yml as the ACL reload installs
// it: swapped whole.
type rotatingRules struct {
	t     *testing.T
	rules atomic.Pointer[acl.Rules]
}

func newRotatingRules(t *testing.T, text string) *rotatingRules {
	r := &rotatingRules{t: t}
	r.set(text)
	return r
}

func (r *rotatingRules) set(text string) {
	rules, err := acl.Parse("plain_acl.yml", []byte(text))
	if err != nil {
		r.t.Fatal(err)
	}
	r.rules.Store(rules)
}

func (r *rotatingRules) get() *acl.Rules { return r.rules.Load() }

// usersOf returns the users of b's open connections.
func usersOf(b *broker) []string {
	var users []string
	for _, c := range b.srv.Connections() {
		users = append(users, c.User)
	}
	return users
}

// closedWith waits (bounded) for the close a NotifyClose channel tells.
func closedWith(t *testing.T, c <-chan *amqp091.Error) *amqp091.Error {
	t.Helper()
	select {
	case e := <-c:
		return e
	case <-time.After(10 * time.Second):
		t.Fatal("timed out waiting for the connection to be closed")
		return nil
	}
}

func hasUser(b *broker, user string) bool {
	for _, u := range usersOf(b) {
		if u == user {
			return true
		}
	}
	return false
}

// A reloaded plain_acl.yml that rotates an account's secret closes the
// connections that logged in with the old one (320 CONNECTION_FORCED);
// the account's new logins need the new secret; a connection of an
// account whose secret did not change stays open, and a change of
// permissions alone closes nothing.
func TestSecretRevokedClosesConnections(t *testing.T) {
	rules := newRotatingRules(t, testACL)
	b := &broker{t: t, dir: t.TempDir(), accounts: rules.get}
	b.start()
	t.Cleanup(b.stop)
	url := func(user, pass string) string { return "amqp://" + user + ":" + pass + "@" + b.addr + "/" }
	dial := func(user, pass string) *amqp091.Connection {
		t.Helper()
		c, err := amqp091.Dial(url(user, pass))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	worker := dial("worker01", "worker-secret")
	admin := dial("admin01", "admin-secret")
	workerClosed := worker.NotifyClose(make(chan *amqp091.Error, 1))
	adminClosed := admin.NotifyClose(make(chan *amqp091.Error, 1))

	// Permissions only: both stay (a check pass sees the new rules).
	rules.set(strings.Replace(testACL, "results=PUB", "results=SUB", 1))
	b.srv.checkSecrets()
	if !hasUser(b, "worker01") || !hasUser(b, "admin01") {
		t.Fatalf("a change of permissions closed connections: %v open", usersOf(b))
	}

	rules.set(strings.Replace(testACL, "worker-secret", "worker-rotated", 1))
	e := closedWith(t, workerClosed)
	if e == nil || e.Code != 320 || !e.Server || !strings.Contains(e.Reason, "no longer valid") {
		t.Fatalf("the connection with the rotated secret was closed with %v, want 320 from the server", e)
	}
	if _, err := amqp091.Dial(url("worker01", "worker-secret")); !isCode(err, 403) {
		t.Fatalf("login with the old secret: %v, want 403", err)
	}
	dial("worker01", "worker-rotated")
	b.srv.checkSecrets() // once more, after the pass that closed worker's
	select {
	case e := <-adminClosed:
		t.Fatalf("the connection of an account whose secret stayed was closed: %v", e)
	default:
	}
	if _, err := admin.Channel(); err != nil {
		t.Fatalf("admin's connection after the rotation: %v", err)
	}

	// The account removed: its connections go too.
	rules.set(strings.Replace(testACL, "admin01", "other001", 1))
	if e := closedWith(t, adminClosed); e == nil || e.Code != 320 {
		t.Fatalf("the connection of a removed account was closed with %v, want 320", e)
	}
}

// A forward connection, opened as Config.PeerAccount for dead-letter
// copies, logs in after a reload with the account's secret in force: the
// home closes the one opened with the rotated secret, and the next copy
// goes over a connection opened with the new one. A client's forward
// connection is its own login: closed on both members with it.
func TestForwardSecretRotated(t *testing.T) {
	const peerACL = testACL + `  - accessKey: peerlink01
    secretKey: peer-secret-1
    admin: true
`
	rotated := strings.Replace(strings.Replace(peerACL, "peer-secret-1", "peer-secret-2", 1), "worker-secret", "worker-rotated", 1)
	ra, rb := newRotatingRules(t, peerACL), newRotatingRules(t, peerACL) // each member's own file
	ca, cb := &staticCluster{}, &staticCluster{}
	a := &broker{t: t, dir: t.TempDir(), cluster: ca, group: "a", accounts: ra.get, peerAccount: "peerlink01"}
	a.start()
	t.Cleanup(a.stop)
	b := &broker{t: t, dir: t.TempDir(), cluster: cb, group: "b", accounts: rb.get}
	b.start()
	t.Cleanup(b.stop)
	ca.set([]Peer{{Group: "b", Addr: b.addr}})
	cb.set([]Peer{{Group: "a", Addr: a.addr}})
	login := func(x *broker, user, pass string) (*amqp091.Connection, *amqp091.Channel) {
		t.Helper()
		conn, err := amqp091.Dial("amqp://" + user + ":" + pass + "@" + x.addr + "/")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		ch, err := conn.Channel()
		if err != nil {
			t.Fatal(err)
		}
		return conn, ch
	}
	_, chb := login(b, "admin01", "admin-secret")
	for _, q := range []string{"dlq", "jobs"} {
		if _, err := chb.QueueDeclare(q, true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
	}
	_, cha := login(a, "admin01", "admin-secret")
	if _, err := cha.QueueDeclare("src", true, false, false, false,
		amqp091.Table{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dlq"}); err != nil {
		t.Fatal(err)
	}
	inDLQ := func() int {
		q, err := chb.QueueDeclarePassive("dlq", true, false, false, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		return q.Messages
	}
	deadLetter := func(body string) {
		t.Helper()
		publishConfirmed(t, cha, "src", body)
		d, ok, err := cha.Get("src", false)
		if err != nil || !ok {
			t.Fatalf("get: %v %v", ok, err)
		}
		if err := d.Reject(false); err != nil {
			t.Fatal(err)
		}
	}
	deadLetter("before")
	waitUntil(t, "the first copy in b's dlq", func() bool { return inDLQ() == 1 })
	if !hasUser(b, "peerlink01") {
		t.Fatalf("b has no connection of the peer account: %v", usersOf(b))
	}
	// A client of a consuming jobs, homed on b: its forward connection
	// logs in to b as worker01.
	worker, chw := login(a, "worker01", "worker-secret")
	workerClosed := worker.NotifyClose(make(chan *amqp091.Error, 1))
	if _, err := chw.Consume("jobs", "", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "worker01's forward connection on b", func() bool { return hasUser(b, "worker01") })

	ra.set(rotated)
	rb.set(rotated)
	if e := closedWith(t, workerClosed); e == nil || e.Code != 320 {
		t.Fatalf("the client with the rotated secret: closed with %v, want 320", e)
	}
	waitUntil(t, "b closed the connections opened with the rotated secrets", func() bool {
		return !hasUser(b, "peerlink01") && !hasUser(b, "worker01")
	})
	deadLetter("after")
	waitUntil(t, "the copy sent after the rotation in b's dlq", func() bool { return inDLQ() == 2 })
	if !hasUser(b, "peerlink01") {
		t.Fatalf("the copy reached b without a connection of the peer account: %v", usersOf(b))
	}
}
