package amqp

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/keelmq/keel/internal/vfs"
)

// TestForwardConcurrentDeclare: many new names, each declared at the same
// moment through every member of three groups (two connections each):
// every declare succeeds, and each name has exactly one queue in the
// cluster; a later declare with other arguments is 406 through any member.
func TestForwardConcurrentDeclare(t *testing.T) {
	bs := startGroups(t, 3)
	var chans []*amqp091.Channel
	for _, b := range bs {
		for range 2 {
			chans = append(chans, b.channel())
		}
	}
	const names = 40
	for i := range names {
		name := fmt.Sprint("race-", i)
		var wg sync.WaitGroup
		start := make(chan struct{})
		errs := make([]error, len(chans))
		for j, ch := range chans {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				_, errs[j] = ch.QueueDeclare(name, true, false, false, false, amqp091.Table{"x-max-length": int32(5)})
			}()
		}
		close(start)
		wg.Wait()
		for j, err := range errs {
			if err != nil {
				t.Fatalf("%s through member %d: %v", name, j/2, err)
			}
		}
		var on []string
		for _, b := range bs {
			if declared(b, name) {
				on = append(on, b.group)
			}
		}
		if len(on) != 1 {
			t.Fatalf("%s is stored by %d groups: %v", name, len(on), on)
		}
	}
	for _, b := range bs {
		err := exception(t, b.channel(), func(ch *amqp091.Channel) error {
			_, err := ch.QueueDeclare("race-0", true, false, false, false, amqp091.Table{"x-max-length": int32(6)})
			return err
		})
		var ae *amqp091.Error
		if !errors.As(err, &ae) || ae.Code != amqp091.PreconditionFailed {
			t.Fatalf("other arguments through %s: %v", b.group, err)
		}
	}
}

// TestClaimArbiterRestart: an arbiter that answered claims and restarts
// refuses claims until claimTTL after its last answer (it forgot whom it
// named): a declare of a new name it arbitrates fails with an error that
// says so, and no group creates the queue; names declared before stay.
func TestClaimArbiterRestart(t *testing.T) {
	a, b := startPair(t)
	var names []string
	for i := 0; len(names) < 2; i++ {
		if n := fmt.Sprint("q", i); arbiter("/", n, []string{"a", "b"}) == "b" {
			names = append(names, n)
		}
	}
	if _, err := a.channel().QueueDeclare(names[0], true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if !declared(a, names[0]) || declared(b, names[0]) {
		t.Fatal("the first declare's queue is not on a alone")
	}
	b.restart()
	err := exception(t, a.channel(), func(ch *amqp091.Channel) error {
		_, err := ch.QueueDeclare(names[1], true, false, false, false, nil)
		return err
	})
	var ae *amqp091.Error
	if !errors.As(err, &ae) || ae.Code != amqp091.NotFound || !strings.Contains(ae.Reason, "broker group b") || !strings.Contains(ae.Reason, "restarted") {
		t.Fatalf("declare while the arbiter waits out its restart: %v", err)
	}
	if declared(a, names[1]) || declared(b, names[1]) {
		t.Fatal("declared while its arbiter refused claims")
	}
	if from := b.srv.claims.from; time.Until(from) < claimTTL-2*time.Second || time.Until(from) > claimTTL+2*claimMarkEvery {
		t.Fatalf("claims answered again in %v", time.Until(from))
	}
	if _, err := a.channel().QueueDeclare(names[0], true, false, false, false, nil); err != nil {
		t.Fatalf("redeclare of a queue a has: %v", err)
	}
}

// TestClaimsFileCoversAnswers: claims.json always holds a time no earlier
// than the last answer, also when the time it held has just passed.
func TestClaimsFileCoversAnswers(t *testing.T) {
	b := startBroker(t)
	s := b.srv
	s.cfg.Group = "g"
	v := s.vhosts["/"]
	for i := range 3 {
		if i > 0 { // as if the last write covered answers until just now
			until := time.Now().Add(-time.Millisecond)
			b := fmt.Appendf(nil, `{"answersUntilMs":%d}`, until.UnixMilli())
			if err := vfs.WriteFileDurable(s.cfg.FS, filepath.Join(s.dir, claimsFile), b, 0o644); err != nil {
				t.Fatal(err)
			}
			s.claims.mu.Lock()
			s.claims.mark = until
			s.claims.mu.Unlock()
		}
		if _, err := s.answerClaim(v, fmt.Sprint("n", i), "x"); err != nil {
			t.Fatal(err)
		}
		answered := time.Now()
		var mk claimsMark
		if err := readJSON(s.cfg.FS, filepath.Join(s.dir, claimsFile), &mk); err != nil {
			t.Fatal(err)
		}
		if at := time.UnixMilli(mk.AnswersUntilMs); at.Before(answered.Add(-time.Millisecond)) {
			t.Fatalf("answer %d at %v, claims.json covers until %v", i, answered, at)
		}
	}
}
