package acl

import (
	"errors"
	"os"
	"strings"
	"testing"
)

func TestParseSample(t *testing.T) {
	data, err := os.ReadFile("testdata/plain_acl.yml")
	if err != nil {
		t.Fatal(err)
	}
	r, err := Parse("testdata/plain_acl.yml", data)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.GlobalWhite) != 2 || r.GlobalWhite[0].String() != "10.10.103.*" || r.GlobalWhite[1].String() != "192.168.0.*" {
		t.Fatalf("global white %v", r.GlobalWhite)
	}
	if len(r.Accounts) != 2 {
		t.Fatalf("accounts %v", r.Accounts)
	}
	a := r.Accounts["RocketMQ"]
	if a == nil || a.SecretKey() != "12345678" || a.Admin || !a.White.empty {
		t.Fatalf("RocketMQ account %+v", a)
	}
	if a.DefaultTopicPerm != Deny || a.DefaultGroupPerm != Sub {
		t.Fatalf("defaults %v %v", a.DefaultTopicPerm, a.DefaultGroupPerm)
	}
	wantT := map[string]Perm{"topicA": Deny, "topicB": Pub | Sub, "topicC": Sub}
	wantG := map[string]Perm{"groupA": Deny, "groupB": Pub | Sub, "groupC": Sub}
	for k, v := range wantT {
		if a.TopicPerms[k] != v {
			t.Errorf("topic %s = %v, want %v", k, a.TopicPerms[k], v)
		}
	}
	for k, v := range wantG {
		if a.GroupPerms[k] != v {
			t.Errorf("group %s = %v, want %v", k, a.GroupPerms[k], v)
		}
	}
	b := r.Accounts["rocketmq2"]
	if b == nil || !b.Admin || b.White.String() != "192.168.1.*" || b.DefaultTopicPerm != Deny || b.TopicPerms != nil {
		t.Fatalf("rocketmq2 account %+v", b)
	}
	if strings.Contains(a.String(), "12345678") {
		t.Fatalf("String leaks the secret: %s", a)
	}
}

func TestParseForms(t *testing.T) {
	// The layout RocketMQ's admin tools write (lists not indented under
	// their key, dataVersion, quoted values), flow lists and comments.
	src := `---
globalWhiteRemoteAddresses: []
accounts:
- accessKey: "quoted key" # comment
  secretKey: 'it''s secret'
  admin: TRUE
  whiteRemoteAddress: '*'
  topicPerms: [a=PUB, 'b=SUB', "c=PUB|SUB"]
  groupPerms:
  - g1=SUB
- accessKey: another1
  secretKey: "tab\there"
dataVersion:
- counter: 3
  timestamp: 1700000000000
`
	r, err := Parse("x.yml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	a := r.Accounts["quoted key"]
	if a == nil || a.SecretKey() != "it's secret" || !a.Admin || !a.White.all {
		t.Fatalf("account %+v", a)
	}
	if a.TopicPerms["a"] != Pub || a.TopicPerms["b"] != Sub || a.TopicPerms["c"] != Pub|Sub || a.GroupPerms["g1"] != Sub {
		t.Fatalf("perms %v %v", a.TopicPerms, a.GroupPerms)
	}
	if r.Accounts["another1"].SecretKey() != "tab\there" {
		t.Fatalf("escape: %q", r.Accounts["another1"].SecretKey())
	}
	for _, empty := range []string{"", "# only a comment\n", "\n\n", "---\n"} {
		r, err := Parse("e.yml", []byte(empty))
		if err != nil || len(r.Accounts) != 0 || len(r.GlobalWhite) != 0 {
			t.Errorf("Parse(%q) = %v, %v", empty, r, err)
		}
	}
}

func TestParseErrors(t *testing.T) {
	acct := "accounts:\n  - accessKey: RocketMQ\n    secretKey: 12345678\n"
	cases := []struct {
		name, src string
		line      int
		msg       string
	}{
		{"unknown top key", "acounts:\n  - x\n", 1, `unknown key "acounts"`},
		{"unknown account key", acct + "    secretkey: x\n", 4, `unknown key "secretkey"`},
		{"bad perm", acct + "    defaultTopicPerm: READ\n", 4, `"READ" is not one of`},
		{"spaced perm", acct + "    topicPerms:\n      - t=PUB | SUB\n", 5, "is not one of"},
		{"no equals", acct + "    topicPerms:\n      - topicA\n", 5, "is not name=PERM"},
		{"empty name", acct + "    groupPerms: [=SUB]\n", 4, "is not name=PERM"},
		{"dup resource", acct + "    topicPerms: [a=PUB, a=SUB]\n", 4, "listed twice"},
		{"short secret", "accounts:\n  - accessKey: RocketMQ\n    secretKey: 123456\n", 3, "at least 7"},
		{"no secret", "accounts:\n  - accessKey: RocketMQ\n", 2, "without secretKey"},
		{"dup key", acct + "  - accessKey: RocketMQ\n    secretKey: abcdefgh\n", 4, "defined twice"},
		{"bad admin", acct + "    admin: yes please\n", 4, "not true or false"},
		{"bad address", acct + "    whiteRemoteAddress: 192.168.1.300\n", 4, "not an IP address"},
		{"bad global", "globalWhiteRemoteAddresses:\n  - 10.*.1.*\n", 2, "must be *"},
		{"tab", "accounts:\n\t- x\n", 2, "tab in indentation"},
		{"alias", "globalWhiteRemoteAddresses:\n  - *\n", 2, "quote the value"},
		{"anchor", "accounts: &a\n", 1, "anchors"},
		{"flow map", "accounts: {a: b}\n", 1, "flow mappings"},
		{"unterminated", "accounts: [a, b\n", 1, "unterminated flow list"},
		{"quote", "accounts:\n  - accessKey: 'abc\n", 2, "unterminated single-quoted"},
		{"escape", "accounts:\n  - accessKey: \"a\\qb\"\n", 2, `unsupported escape \q`},
		{"over-indent", "accounts:\n  - accessKey: RocketMQ\n      secretKey: 12345678\n", 3, "unexpected indentation"},
		{"dup map key", acct + "    secretKey: 87654321\n", 4, `duplicate key "secretKey"`},
		{"account not map", "accounts:\n  - RocketMQ\n", 2, "expected a mapping"},
		{"accounts scalar", "accounts: RocketMQ\n", 1, "expected a list"},
		{"top scalar", "hello\n", 1, "expected a mapping"},
		{"two docs", "accounts:\n---\n", 2, "only one YAML document"},
		{"colon value", acct + "    whiteRemoteAddress: a: b\n", 4, "quote a value"},
		{"indented start", "  accounts:\n", 1, "column 1"},
		{"control char", "accounts:\x01\n", 1, "control character"},
		{"list where key", "accounts:\n  - accessKey: RocketMQ\n    - x\n", 3, "list item where a key"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse("f.yml", []byte(c.src))
			var pe *ParseError
			if !errors.As(err, &pe) || !errors.Is(err, ErrSyntax) {
				t.Fatalf("err %v, want a *ParseError", err)
			}
			if pe.Line != c.line || !strings.Contains(pe.Msg, c.msg) || pe.File != "f.yml" {
				t.Fatalf("err %q (line %d), want line %d containing %q", err, pe.Line, c.line, c.msg)
			}
			if strings.Contains(err.Error(), "12345678") && c.name != "dup map key" {
				t.Fatalf("error leaks a secret: %v", err)
			}
		})
	}
}

func TestParseTooLarge(t *testing.T) {
	big := make([]byte, MaxFileBytes+1)
	for i := range big {
		big[i] = '#'
	}
	if _, err := Parse("big.yml", big); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Fatalf("err %v", err)
	}
}
