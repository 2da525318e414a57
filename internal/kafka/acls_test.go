package kafka

import (
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/keelmq/keel/internal/acl"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/plain"
)

// testAccounts as a RuleEditor (cmd/keel has the same adapter).
func (k testAccounts) Rules() []AccountRules {
	var out []AccountRules
	for _, a := range k.a.Rules().Accounts {
		out = append(out, testRulesOf(a))
	}
	return out
}

func (k testAccounts) EditRules(edit func(map[string]*AccountRules) error) error {
	return k.a.Update(func(r *acl.Rules) error {
		m := map[string]*AccountRules{}
		for u, a := range r.Accounts {
			ar := testRulesOf(a)
			m[u] = &ar
		}
		if err := edit(m); err != nil {
			return err
		}
		for u, ar := range m {
			a := r.Accounts[u]
			a.DefaultTopicPerm, a.DefaultGroupPerm = testPermOf(ar.DefaultTopic), testPermOf(ar.DefaultGroup)
			a.TopicPerms, a.GroupPerms = map[string]acl.Perm{}, map[string]acl.Perm{}
			for n, g := range ar.Topics {
				a.TopicPerms[n] = testPermOf(g)
			}
			for n, g := range ar.Groups {
				a.GroupPerms[n] = testPermOf(g)
			}
		}
		return nil
	})
}

func testRulesOf(a *acl.Account) AccountRules {
	ar := AccountRules{User: a.AccessKey, Admin: a.Admin, DefaultTopic: testGrantOf(a.DefaultTopicPerm), DefaultGroup: testGrantOf(a.DefaultGroupPerm),
		Topics: map[string]Grant{}, Groups: map[string]Grant{}}
	for n, p := range a.TopicPerms {
		ar.Topics[n] = testGrantOf(p)
	}
	for n, p := range a.GroupPerms {
		ar.Groups[n] = testGrantOf(p)
	}
	return ar
}

func testGrantOf(p acl.Perm) (g Grant) {
	if p&acl.Deny != 0 {
		return GrantDeny
	}
	if p&acl.Pub != 0 {
		g |= GrantPub
	}
	if p&acl.Sub != 0 {
		g |= GrantSub
	}
	return g
}

func testPermOf(g Grant) (p acl.Perm) {
	if g&GrantDeny != 0 || g == 0 {
		return acl.Deny
	}
	if g&GrantPub != 0 {
		p |= acl.Pub
	}
	if g&GrantSub != 0 {
		p |= acl.Sub
	}
	return p
}

// startACLFileNode starts a node whose access control is the file at
// path (written with testACL if absent), as keel serve reads it.
func startACLFileNode(t *testing.T, path string) *testNode {
	t.Helper()
	if _, err := os.Stat(path); err != nil {
		if err := os.WriteFile(path, []byte(testACL), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	a, err := acl.New(acl.Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	return startNodeWith(t, nil, Config{ACL: testAccounts{a}})
}

func describeAllACLs(t *testing.T, cl *kgo.Client) []string {
	t.Helper()
	req := kmsg.NewPtrDescribeACLsRequest()
	req.ResourceType, req.ResourcePatternType = kmsg.ACLResourceTypeAny, kmsg.ACLResourcePatternTypeAny
	req.Operation, req.PermissionType = kmsg.ACLOperationAny, kmsg.ACLPermissionTypeAny
	resp, err := req.RequestWith(ctx30(t), cl)
	if err != nil {
		t.Fatal(err)
	}
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		t.Fatalf("describe: %v", err)
	}
	var out []string
	for _, r := range resp.Resources {
		if r.ResourcePatternType != kmsg.ACLResourcePatternTypeLiteral {
			t.Fatalf("pattern %v", r.ResourcePatternType)
		}
		for _, a := range r.ACLs {
			out = append(out, strings.Join([]string{a.Principal, r.ResourceType.String(), r.ResourceName, a.Operation.String(), a.PermissionType.String(), a.Host}, " "))
		}
	}
	slices.Sort(out)
	return out
}

func describeACLsCode(t *testing.T, cl *kgo.Client) int16 {
	t.Helper()
	req := kmsg.NewPtrDescribeACLsRequest()
	req.ResourceType, req.ResourcePatternType = kmsg.ACLResourceTypeAny, kmsg.ACLResourcePatternTypeAny
	req.Operation, req.PermissionType = kmsg.ACLOperationAny, kmsg.ACLPermissionTypeAny
	resp, err := req.RequestWith(ctx30(t), cl)
	if err != nil {
		t.Fatal(err)
	}
	return resp.ErrorCode
}

// TestKadmACLs: kadm describes plain_acl.yml's accounts as Kafka ACLs,
// creates and deletes LITERAL ALLOW bindings on topics and groups (in
// force at once: a producer may then write, a consumer no longer read,
// and written to plain_acl.yml, read again after a restart), and each
// binding the file cannot express is refused on its own with the reason.
func TestKadmACLs(t *testing.T) {
	path := filepath.Join(t.TempDir(), "plain_acl.yml")
	n := startACLFileNode(t, path)
	ctx := ctx30(t)
	adminCl := saslClient(t, n.addr, plain.Auth{User: "admin01", Pass: "admin-secret"}.AsMechanism())
	admin := kadm.NewClient(adminCl)
	for _, topic := range []string{"orders", "payments"} {
		if _, err := admin.CreateTopic(ctx, 1, 1, nil, topic); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{
		"User:admin01 CLUSTER kafka-cluster ALL ALLOW *",
		"User:admin01 GROUP * ALL ALLOW *",
		"User:admin01 TOPIC * ALL ALLOW *",
		"User:consumer1 GROUP billing READ ALLOW *",
		"User:consumer1 TOPIC orders READ ALLOW *",
		"User:producer1 TOPIC audit READ ALLOW *",
		"User:producer1 TOPIC audit WRITE ALLOW *",
		"User:producer1 TOPIC orders WRITE ALLOW *",
	}
	if got := describeAllACLs(t, adminCl); !slices.Equal(got, want) {
		t.Fatalf("described\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// A filter: consumer1's bindings on orders (MATCH also matches *).
	ds, err := admin.DescribeACLs(ctx, kadm.NewACLs().Topics("orders").Allow("User:consumer1").AllowHosts().Operations(kadm.OpAny).ResourcePatternType(kadm.ACLPatternMatch))
	if err != nil || len(ds) != 1 || ds[0].Err != nil || len(ds[0].Described) != 1 || ds[0].Described[0].Operation != kadm.OpRead {
		t.Fatalf("filtered describe: %v %+v", err, ds)
	}

	producer := saslClient(t, n.addr, plain.Auth{User: "producer1", Pass: "producer-secret"}.AsMechanism())
	r := &kgo.Record{Topic: "payments", Partition: 0, Value: []byte("x")}
	if err := producer.ProduceSync(ctx, r).FirstErr(); !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Fatalf("produce before the grant: %v", err)
	}
	cs, err := admin.CreateACLs(ctx, kadm.NewACLs().Topics("payments").Allow("User:producer1").Operations(kadm.OpDescribe, kadm.OpWrite))
	if err != nil || len(cs) != 2 || cs[0].Err != nil || cs[1].Err != nil {
		t.Fatalf("create: %v %+v", err, cs)
	}
	if err := producer.ProduceSync(ctx, r).FirstErr(); err != nil {
		t.Fatalf("produce after the grant: %v", err)
	}

	refused := []*kadm.ACLBuilder{
		kadm.NewACLs().Topics("payments").Deny("User:producer1").Operations(kadm.OpRead),
		kadm.NewACLs().Topics("pay").Allow("User:producer1").Operations(kadm.OpRead).ResourcePatternType(kadm.ACLPatternPrefixed),
		kadm.NewACLs().Topics("payments").Allow("User:producer1").AllowHosts("10.0.0.1").Operations(kadm.OpRead),
		kadm.NewACLs().Clusters().Allow("User:producer1").Operations(kadm.OpAlter),
		kadm.NewACLs().TransactionalIDs("tx").Allow("User:producer1").Operations(kadm.OpWrite),
		kadm.NewACLs().Topics("payments").Allow("User:nobody01").Operations(kadm.OpRead),
		kadm.NewACLs().Topics("payments").Allow("User:admin01").Operations(kadm.OpRead),
		kadm.NewACLs().Topics("payments").Allow("User:consumer1").Operations(kadm.OpDescribe),
		kadm.NewACLs().Topics("payments").Allow("User:consumer1").Operations(kadm.OpAlter),
	}
	for i, b := range refused {
		cs, err := admin.CreateACLs(ctx, b)
		if err != nil || len(cs) != 1 || !errors.Is(cs[0].Err, kerr.InvalidRequest) || cs[0].ErrMessage == "" {
			t.Fatalf("refusal %d: %v %+v", i, err, cs)
		}
	}

	consumer := saslClient(t, n.addr, plain.Auth{User: "consumer1", Pass: "consumer-secret"}.AsMechanism())
	lo := func() error {
		rs, err := kadm.NewClient(consumer).ListStartOffsets(ctx, "orders")
		if err != nil {
			return err
		}
		return rs.Error()
	}
	if err := lo(); err != nil {
		t.Fatalf("list offsets before the deletion: %v", err)
	}
	del, err := admin.DeleteACLs(ctx, kadm.NewACLs().Topics("orders").Allow("User:consumer1").AllowHosts().Operations(kadm.OpRead).ResourcePatternType(kadm.ACLPatternLiteral))
	if err != nil || len(del) != 1 || del[0].Err != nil || len(del[0].Deleted) != 1 || del[0].Deleted[0].Err != nil {
		t.Fatalf("delete: %v %+v", err, del)
	}
	if err := lo(); !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Fatalf("list offsets after the deletion: %v", err)
	}
	// The admin's cluster binding is matched but not deleted.
	del, err = admin.DeleteACLs(ctx, kadm.NewACLs().Clusters().Allow("User:admin01").AllowHosts().Operations(kadm.OpAny).ResourcePatternType(kadm.ACLPatternAny))
	if err != nil || len(del) != 1 || len(del[0].Deleted) != 1 || !errors.Is(del[0].Deleted[0].Err, kerr.InvalidRequest) {
		t.Fatalf("delete the admin's binding: %v %+v", err, del)
	}

	want = []string{
		"User:admin01 CLUSTER kafka-cluster ALL ALLOW *",
		"User:admin01 GROUP * ALL ALLOW *",
		"User:admin01 TOPIC * ALL ALLOW *",
		"User:consumer1 GROUP billing READ ALLOW *",
		"User:producer1 TOPIC audit READ ALLOW *",
		"User:producer1 TOPIC audit WRITE ALLOW *",
		"User:producer1 TOPIC orders WRITE ALLOW *",
		"User:producer1 TOPIC payments WRITE ALLOW *",
	}
	if got := describeAllACLs(t, adminCl); !slices.Equal(got, want) {
		t.Fatalf("after the changes\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	data, err := os.ReadFile(path)
	if err != nil || !strings.Contains(string(data), "'payments=PUB'") || strings.Contains(string(data), "orders=SUB") {
		t.Fatalf("plain_acl.yml now: %v\n%s", err, data)
	}

	n.stop()
	n = startACLFileNode(t, path)
	adminCl = saslClient(t, n.addr, plain.Auth{User: "admin01", Pass: "admin-secret"}.AsMechanism())
	if got := describeAllACLs(t, adminCl); !slices.Equal(got, want) {
		t.Fatalf("after a restart\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestACLCreationNeverTakesAway: a first rule for a topic keeps what the
// account's default gave it there (a rule overrides the default).
func TestACLCreationNeverTakesAway(t *testing.T) {
	a := &AccountRules{User: "u", DefaultTopic: GrantPub}
	c := kmsg.NewCreateACLsRequestCreation()
	c.ResourceType, c.ResourceName, c.ResourcePatternType = kmsg.ACLResourceTypeTopic, "t", kmsg.ACLResourcePatternTypeLiteral
	c.Principal, c.Host, c.Operation, c.PermissionType = "User:u", "*", kmsg.ACLOperationRead, kmsg.ACLPermissionTypeAllow
	if changed, m := createACL(map[string]*AccountRules{"u": a}, c); !changed || m != "" {
		t.Fatal(changed, m)
	}
	if a.Topics["t"] != GrantPub|GrantSub {
		t.Fatalf("rule %v, want PUB|SUB", a.Topics["t"])
	}
}

// TestACLDeletionNeverGrants: removing an account's last permission on a
// topic whose default grants more leaves a DENY rule, not the default.
func TestACLDeletionNeverGrants(t *testing.T) {
	a := &AccountRules{User: "u", DefaultTopic: GrantPub, Topics: map[string]Grant{"t": GrantSub}}
	if m := deleteBinding(a, aclBinding{kmsg.ACLResourceTypeTopic, "t", "u", kmsg.ACLOperationRead, kmsg.ACLPermissionTypeAllow}); m != "" {
		t.Fatal(m)
	}
	if a.Topics["t"] != GrantDeny {
		t.Fatalf("rule left %v, want DENY", a.Topics["t"])
	}
	b := &AccountRules{User: "v", Admin: true, DefaultTopic: GrantDeny, DefaultGroup: GrantDeny, Topics: map[string]Grant{"t": GrantSub}}
	if m := deleteBinding(b, aclBinding{kmsg.ACLResourceTypeTopic, "t", "v", kmsg.ACLOperationRead, kmsg.ACLPermissionTypeAllow}); m == "" || !maps.Equal(b.Topics, map[string]Grant{"t": GrantSub}) {
		t.Fatalf("an admin's last rule: %q %v", m, b.Topics)
	}
}

// TestACLsSecurityDisabled: without access control the ACL APIs answer
// SECURITY_DISABLED, as Kafka without an authorizer.
func TestACLsSecurityDisabled(t *testing.T) {
	n := startNode(t, nil)
	cl, adm := adminClient(t, n.addr)
	ctx := ctx30(t)
	if code := describeACLsCode(t, cl); code != errSecurityDisabled {
		t.Fatalf("describe: %d", code)
	}
	cs, err := adm.CreateACLs(ctx, kadm.NewACLs().Topics("t").Allow("User:x").Operations(kadm.OpRead))
	if err != nil || len(cs) != 1 || !errors.Is(cs[0].Err, kerr.SecurityDisabled) {
		t.Fatalf("create: %v %+v", err, cs)
	}
	del, err := adm.DeleteACLs(ctx, kadm.NewACLs().Topics("t").Allow("User:x").AllowHosts().Operations(kadm.OpRead).ResourcePatternType(kadm.ACLPatternLiteral))
	if err != nil || len(del) != 1 || !errors.Is(del[0].Err, kerr.SecurityDisabled) {
		t.Fatalf("delete: %v %+v", err, del)
	}
}

// TestACLAPIsNeedAdmin: an account that is not an admin may not describe
// or change the ACLs.
func TestACLAPIsNeedAdmin(t *testing.T) {
	n := startACLNode(t)
	ctx := ctx30(t)
	userCl := saslClient(t, n.addr, plain.Auth{User: "producer1", Pass: "producer-secret"}.AsMechanism())
	user := kadm.NewClient(userCl)
	if code := describeACLsCode(t, userCl); code != errClusterAuthorization {
		t.Fatalf("describe: %d", code)
	}
	cs, err := user.CreateACLs(ctx, kadm.NewACLs().Topics("payments").Allow("User:producer1").Operations(kadm.OpWrite))
	if err != nil || len(cs) != 1 || !errors.Is(cs[0].Err, kerr.ClusterAuthorizationFailed) {
		t.Fatalf("create: %v %+v", err, cs)
	}
}
