package acl

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/keelmq/keel/internal/vfs"
)

const writeTestACL = `
globalWhiteRemoteAddresses:
  - 10.10.103.*
  - 192.168.0.{1,2}
accounts:
  - accessKey: producer1
    secretKey: "it's a: #secret"
    whiteRemoteAddress: 192.168.7.{1,2}
    defaultTopicPerm: PUB
    topicPerms: [orders=PUB|SUB, audit=DENY]
    groupPerms:
      - billing=SUB
  - accessKey: admin01
    secretKey: admin-secret
    admin: true
`

// TestMarshalRoundTrip: Marshal writes what Parse reads back as the same
// rules, secrets and address patterns included.
func TestMarshalRoundTrip(t *testing.T) {
	r, err := Parse("", []byte(writeTestACL))
	if err != nil {
		t.Fatal(err)
	}
	back, err := Parse("", r.Marshal())
	if err != nil {
		t.Fatalf("%v\n%s", err, r.Marshal())
	}
	if len(back.GlobalWhite) != 2 || back.GlobalWhite[0].src != "10.10.103.*" || back.GlobalWhite[1].src != "192.168.0.{1,2}" {
		t.Fatalf("global white %+v", back.GlobalWhite)
	}
	for k, a := range r.Accounts {
		b := back.Accounts[k]
		if b == nil || b.secretKey != a.secretKey || b.Admin != a.Admin || b.DefaultTopicPerm != a.DefaultTopicPerm ||
			b.DefaultGroupPerm != a.DefaultGroupPerm || !reflect.DeepEqual(b.TopicPerms, a.TopicPerms) ||
			!reflect.DeepEqual(b.GroupPerms, a.GroupPerms) || (a.White == nil) != (b.White == nil) || a.White != nil && a.White.src != b.White.src {
			t.Fatalf("account %s read back as %+v, was %+v", k, b, a)
		}
	}
}

// TestUpdateRewritesTheFile: Update installs the changed rules and writes
// them to the file, which a new Authorizer reads; a change that fails
// changes nothing.
func TestUpdateRewritesTheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "plain_acl.yml")
	if err := os.WriteFile(path, []byte(writeTestACL), 0o600); err != nil {
		t.Fatal(err)
	}
	a, err := New(Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Update(func(r *Rules) error {
		r.Accounts["producer1"].TopicPerms["payments"] = Pub
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if !a.Account("producer1").MayTopic("payments", Pub) {
		t.Fatal("the change is not in force")
	}
	if changed, err := a.Reload(); changed || err != nil {
		t.Fatalf("reload after update: changed %v, %v", changed, err)
	}
	b, err := New(Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	if acct := b.Account("producer1"); !acct.MayTopic("payments", Pub) || acct.SecretKey() != "it's a: #secret" || !acct.MayTopic("orders", Sub) {
		t.Fatalf("the file read again: %+v", acct)
	}
	if err := a.Update(func(r *Rules) error {
		r.Accounts["producer1"].TopicPerms["bad name=x"] = Pub // cannot be written
		return nil
	}); err == nil {
		t.Fatal("an unwritable rule was accepted")
	}
	if _, ok := a.Account("producer1").TopicPerms["bad name=x"]; ok {
		t.Fatal("a failed update changed the rules in force")
	}

	// An edit of the file the poll has not seen yet is kept.
	edited := strings.Replace(writeTestACL, "audit=DENY", "audit=SUB", 1)
	if err := os.WriteFile(path, []byte(edited), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := a.Update(func(r *Rules) error {
		r.Accounts["admin01"].TopicPerms = map[string]Perm{"ops": Sub}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if acct := a.Account("producer1"); !acct.MayTopic("audit", Sub) || acct.TopicPerms["payments"] != 0 || !a.Account("admin01").MayTopic("ops", Sub) {
		t.Fatalf("the file's edit is lost: %+v", acct)
	}
	if err := os.WriteFile(path, []byte("accounts: [\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := a.Update(func(*Rules) error { return nil }); err == nil {
		t.Fatal("an update over a file that does not parse was accepted")
	}
	if b, _ := os.ReadFile(path); string(b) != "accounts: [\n" {
		t.Fatalf("the broken file was overwritten: %q", b)
	}
}

// memReader reads files of a MemFS.
func memReader(fs *vfs.MemFS) func(string) ([]byte, error) {
	return func(path string) ([]byte, error) {
		f, err := fs.OpenFile(path, os.O_RDONLY, 0)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		size, err := f.Size()
		if err != nil {
			return nil, err
		}
		b := make([]byte, size)
		if _, err := f.ReadAt(b, 0); err != nil && !errors.Is(err, io.EOF) {
			return nil, err
		}
		return b, nil
	}
}

// TestUpdateSurvivesPowerLoss: once Update returns, a power loss (torn
// unsynced writes, several seeds) leaves the new file, whole.
func TestUpdateSurvivesPowerLoss(t *testing.T) {
	fs := vfs.NewMem()
	if err := vfs.MkdirAllDurable(fs, "/etc", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := vfs.WriteFileDurable(fs, "/etc/plain_acl.yml", []byte(writeTestACL), 0o600); err != nil {
		t.Fatal(err)
	}
	a, err := New(Config{Path: "/etc/plain_acl.yml", FS: fs, ReadFile: memReader(fs)})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		name := fmt.Sprintf("topic%d", i)
		if err := a.Update(func(r *Rules) error {
			r.Accounts["producer1"].TopicPerms[name] = Sub
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		for seed := range uint64(4) {
			survived := fs.CrashCloneWith(rand.New(rand.NewPCG(seed, uint64(i))))
			b, err := New(Config{Path: "/etc/plain_acl.yml", FS: survived, ReadFile: memReader(survived)})
			if err != nil {
				t.Fatalf("change %d, seed %d: %v", i, seed, err)
			}
			if !b.Account("producer1").MayTopic(name, Sub) {
				t.Fatalf("change %d, seed %d: the change is lost", i, seed)
			}
		}
	}
}
