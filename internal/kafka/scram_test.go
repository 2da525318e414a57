package kafka

import (
	"errors"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// TestKadmUserSCRAMs: every account is described with SCRAM-SHA-256 and
// SCRAM-SHA-512 at 4096 iterations; an upsertion of the account's own
// password is accepted, one of another password refused (the secret is
// plain_acl.yml's) and changes nothing, a deletion is refused, unknown
// accounts are not found, and only an admin may ask.
func TestKadmUserSCRAMs(t *testing.T) {
	n := startACLNode(t)
	ctx := ctx30(t)
	admin := kadm.NewClient(saslClient(t, n.addr, plain.Auth{User: "admin01", Pass: "admin-secret"}.AsMechanism()))
	ds, err := admin.DescribeUserSCRAMs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) != 3 {
		t.Fatalf("described %+v", ds)
	}
	for _, u := range []string{"producer1", "consumer1", "admin01"} {
		d := ds[u]
		if d.Err != nil || len(d.CredInfos) != 2 || d.CredInfos[0] != (kadm.CredInfo{Mechanism: kadm.ScramSha256, Iterations: 4096}) ||
			d.CredInfos[1] != (kadm.CredInfo{Mechanism: kadm.ScramSha512, Iterations: 4096}) {
			t.Fatalf("%s: %+v", u, d)
		}
	}
	if ds, err = admin.DescribeUserSCRAMs(ctx, "producer1", "nobody01"); err != nil || ds["producer1"].Err != nil || !errors.Is(ds["nobody01"].Err, kerr.ResourceNotFound) {
		t.Fatalf("named: %v %+v", err, ds)
	}

	as, err := admin.AlterUserSCRAMs(ctx, nil, []kadm.UpsertSCRAM{{User: "producer1", Mechanism: kadm.ScramSha512, Iterations: 8192, Password: "producer-secret"}})
	if err != nil || as["producer1"].Err != nil {
		t.Fatalf("upsert the account's own password: %v %+v", err, as)
	}
	as, err = admin.AlterUserSCRAMs(ctx, nil, []kadm.UpsertSCRAM{
		{User: "producer1", Mechanism: kadm.ScramSha256, Iterations: 4096, Password: "another-password"},
		{User: "nobody01", Mechanism: kadm.ScramSha256, Iterations: 4096, Password: "whatever1"},
	})
	if err != nil || !errors.Is(as["producer1"].Err, kerr.UnacceptableCredential) || as["producer1"].ErrMessage == "" || !errors.Is(as["nobody01"].Err, kerr.ResourceNotFound) {
		t.Fatalf("upsert another password: %v %+v", err, as)
	}
	as, err = admin.AlterUserSCRAMs(ctx, []kadm.DeleteSCRAM{{User: "consumer1", Mechanism: kadm.ScramSha256}}, nil)
	if err != nil || !errors.Is(as["consumer1"].Err, kerr.InvalidRequest) {
		t.Fatalf("delete: %v %+v", err, as)
	}
	as, err = admin.AlterUserSCRAMs(ctx, []kadm.DeleteSCRAM{{User: "consumer1", Mechanism: kadm.ScramSha256}},
		[]kadm.UpsertSCRAM{{User: "consumer1", Mechanism: kadm.ScramSha256, Iterations: 4096, Password: "consumer-secret"}})
	if err != nil || !errors.Is(as["consumer1"].Err, kerr.DuplicateResource) {
		t.Fatalf("delete and upsert one mechanism: %v %+v", err, as)
	}

	// The password is still the account's secret.
	for pass, ok := range map[string]bool{"producer-secret": true, "another-password": false} {
		cl := saslClient(t, n.addr, scram.Auth{User: "producer1", Pass: pass}.AsSha256Mechanism())
		_, err := kadm.NewClient(cl).ListTopics(ctx)
		if (err == nil) != ok {
			t.Fatalf("SCRAM login with %q: %v", pass, err)
		}
	}

	user := kadm.NewClient(saslClient(t, n.addr, plain.Auth{User: "producer1", Pass: "producer-secret"}.AsMechanism()))
	var ae *kadm.AuthError
	if _, err := user.DescribeUserSCRAMs(ctx); !errors.As(err, &ae) {
		t.Fatalf("describe as a user: %v", err)
	}
	as, err = user.AlterUserSCRAMs(ctx, nil, []kadm.UpsertSCRAM{{User: "producer1", Mechanism: kadm.ScramSha256, Iterations: 4096, Password: "producer-secret"}})
	if !errors.As(err, &ae) && !errors.Is(as["producer1"].Err, kerr.ClusterAuthorizationFailed) {
		t.Fatalf("alter as a user: %v %+v", err, as)
	}
}

// TestUserSCRAMsSecurityDisabled: without access control there are no
// accounts.
func TestUserSCRAMsSecurityDisabled(t *testing.T) {
	n := startNode(t, nil)
	_, adm := adminClient(t, n.addr)
	ctx := ctx30(t)
	if _, err := adm.DescribeUserSCRAMs(ctx); !errors.Is(err, kerr.SecurityDisabled) {
		t.Fatalf("describe: %v", err)
	}
	as, err := adm.AlterUserSCRAMs(ctx, nil, []kadm.UpsertSCRAM{{User: "someone", Mechanism: kadm.ScramSha256, Iterations: 4096, Password: "password1"}})
	if err != nil || !errors.Is(as["someone"].Err, kerr.SecurityDisabled) {
		t.Fatalf("alter: %v %+v", err, as)
	}
}
