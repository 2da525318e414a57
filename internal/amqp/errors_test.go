package amqp

import (
	"regexp"
	"strings"
	"testing"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/keelmq/keel/internal/amqp/wire"
)

// exceptionLines returns the exception lines logged so far.
func exceptionLines(logs *syncBuf) []string {
	var out []string
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, `msg="amqp: channel exception"`) || strings.Contains(l, `msg="amqp: connection exception"`) {
			out = append(out, l)
		}
	}
	return out
}

// Every exception the broker sends is logged once at WARN with the
// connection, user, vhost, channel, method, code and reason; a
// connection's lines are rate-limited, the dropped ones counted.
func TestExceptionsLogged(t *testing.T) {
	var logs syncBuf
	b := &broker{t: t, dir: t.TempDir(), logs: &logs}
	b.start()
	t.Cleanup(b.stop)

	conn := b.dial()
	ch, _ := conn.Channel()
	if err := exception(t, ch, func(ch *amqp091.Channel) error {
		_, err := ch.QueueDeclarePassive("missing", true, false, false, false, nil)
		return err
	}); !isCode(err, 404) {
		t.Fatalf("passive declare of a missing queue: %v", err)
	}
	local := conn.LocalAddr().String()
	waitUntil(t, "the channel exception to be logged", func() bool { return len(exceptionLines(&logs)) == 1 })
	line := exceptionLines(&logs)[0]
	for _, want := range []string{"level=WARN", "remote=" + local, "user=guest", "vhost=/", "channel=1",
		"method=queue.declare", "code=404", `reason="NOT_FOUND - no queue 'missing' in vhost '/'"`} {
		if !strings.Contains(line, want) {
			t.Fatalf("the line %q lacks %s", line, want)
		}
	}

	// A connection exception (an unknown method on channel 0).
	r := dialRaw(t, b)
	r.open()
	r.send(wire.AppendMethodFrame(nil, 0, &wire.BasicQos{PrefetchCount: 1}))
	r.expectClose(wire.CommandInvalid)
	waitUntil(t, "the connection exception to be logged", func() bool { return len(exceptionLines(&logs)) == 2 })
	line = exceptionLines(&logs)[1]
	for _, want := range []string{"level=WARN", `msg="amqp: connection exception"`, "remote=" + r.nc.LocalAddr().String(),
		"channel=0", "method=basic.qos", "code=503", "COMMAND_INVALID"} {
		if !strings.Contains(line, want) {
			t.Fatalf("the line %q lacks %s", line, want)
		}
	}

	// A refused login names the user that tried.
	if c, err := amqp091.Dial("amqp://guest:wrong@" + b.addr + "/"); err == nil {
		c.Close()
		t.Fatal("a wrong password was let in")
	}
	waitUntil(t, "the refused login to be logged", func() bool { return len(exceptionLines(&logs)) == 3 })
	line = exceptionLines(&logs)[2]
	for _, want := range []string{"level=WARN", `msg="amqp: connection exception"`, "user=guest", "vhost=\"\"",
		"channel=0", "method=connection.start-ok", "code=403", "ACCESS_REFUSED - Login was refused"} {
		if !strings.Contains(line, want) {
			t.Fatalf("the line %q lacks %s", line, want)
		}
	}

	// A client causing exceptions in a loop: a burst, then the limit.
	flood := b.dial()
	cause := func() {
		ch, err := flood.Channel()
		if err != nil {
			t.Fatal(err)
		}
		exception(t, ch, func(ch *amqp091.Channel) error {
			_, err := ch.QueueDeclarePassive("missing", true, false, false, false, nil)
			return err
		})
	}
	before := len(exceptionLines(&logs))
	const tries = 3 * exceptionBurst
	for range tries {
		cause()
	}
	mine := func() []string {
		var out []string
		for _, l := range exceptionLines(&logs)[before:] {
			if strings.Contains(l, "remote="+flood.LocalAddr().String()) {
				out = append(out, l)
			}
		}
		return out
	}
	if n := len(mine()); n < exceptionBurst || n >= tries {
		t.Fatalf("%d exceptions in a loop logged %d lines, want at least %d and fewer than all", tries, n, exceptionBurst)
	}
	// Once the limit lets a line through again, it counts those dropped.
	n := len(mine())
	waitUntil(t, "a line after the burst", func() bool {
		cause()
		return len(mine()) > n
	})
	last := mine()[len(mine())-1]
	if !regexp.MustCompile(`suppressed=[1-9]`).MatchString(last) {
		t.Fatalf("the line after dropped ones does not count them: %q", last)
	}
}
