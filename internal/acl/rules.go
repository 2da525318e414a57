package acl

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// MinKeyLength is RocketMQ's bound: access and secret keys must be longer
// than 6 characters.
const MinKeyLength = 7

// ErrSyntax is wrapped by every error Parse returns.
var ErrSyntax = errors.New("acl: invalid ACL file")

// Rules is one parsed plain_acl.yml. It is immutable once built.
type Rules struct {
	GlobalWhite []*addrPattern
	Accounts    map[string]*Account // by access key
}

// Account is one entry of "accounts".
type Account struct {
	AccessKey        string
	secretKey        string // never logged or printed
	White            *addrPattern
	Admin            bool
	DefaultTopicPerm Perm
	DefaultGroupPerm Perm
	TopicPerms       map[string]Perm
	GroupPerms       map[string]Perm
}

// SecretKey returns the account's secret.
func (a *Account) SecretKey() string { return a.secretKey }

// String describes the account without its secret.
func (a *Account) String() string {
	return fmt.Sprintf("account %s (admin=%t, %d topic and %d group rules)", a.AccessKey, a.Admin, len(a.TopicPerms), len(a.GroupPerms))
}

// ParseError is a problem at a line of an ACL file.
type ParseError struct {
	File string // may be empty
	Line int
	Msg  string
}

func (e *ParseError) Error() string {
	name := e.File
	if name == "" {
		name = "plain_acl.yml"
	}
	return fmt.Sprintf("acl: %s:%d: %s", name, e.Line, e.Msg)
}

func (e *ParseError) Unwrap() error { return ErrSyntax }

var (
	topLevelKeys = []string{"globalWhiteRemoteAddresses", "accounts", "dataVersion"}
	accountKeys  = []string{"accessKey", "secretKey", "whiteRemoteAddress", "admin",
		"defaultTopicPerm", "defaultGroupPerm", "topicPerms", "groupPerms"}
)

// Parse reads a plain_acl.yml (RocketMQ ACL 1.0 format). file names the
// source in errors. It is strict: unknown keys, malformed permissions or
// addresses, short keys and duplicate access keys are errors.
func Parse(file string, data []byte) (*Rules, error) {
	r, err := parse(data)
	var pe *ParseError
	if errors.As(err, &pe) {
		pe.File = file
	}
	return r, err
}

func parse(data []byte) (*Rules, error) {
	if len(data) > MaxFileBytes {
		return nil, &ParseError{Line: 1, Msg: fmt.Sprintf("file is larger than %d bytes", MaxFileBytes)}
	}
	root, err := parseYAML(data)
	if err != nil {
		var se *syntaxError
		if errors.As(err, &se) {
			return nil, &ParseError{Line: se.line, Msg: se.msg}
		}
		return nil, err
	}
	r := &Rules{Accounts: make(map[string]*Account)}
	if root.kind == nullNode {
		return r, nil
	}
	if root.kind != mapNode {
		return nil, perr(root, "expected a mapping with globalWhiteRemoteAddresses and accounts, found %s", root.kind)
	}
	if err := checkKeys(root, topLevelKeys); err != nil {
		return nil, err
	}
	if r.GlobalWhite, err = parseGlobalWhite(root.lookup("globalWhiteRemoteAddresses")); err != nil {
		return nil, err
	}
	// dataVersion is written by RocketMQ's admin tools; Keel ignores it.
	if err := r.parseAccounts(root.lookup("accounts")); err != nil {
		return nil, err
	}
	return r, nil
}

func perr(n *node, format string, args ...any) error {
	return &ParseError{Line: n.line, Msg: fmt.Sprintf(format, args...)}
}

func checkKeys(m *node, known []string) error {
	for i, k := range m.keys {
		if !slices.Contains(known, k) {
			return &ParseError{Line: m.kline[i], Msg: fmt.Sprintf("unknown key %q (known keys: %s)", k, strings.Join(known, ", "))}
		}
	}
	return nil
}

// list returns the items of a sequence node; a null node is an empty list.
func list(n *node, what string) ([]*node, error) {
	switch {
	case n == nil || n.kind == nullNode:
		return nil, nil
	case n.kind != seqNode:
		return nil, perr(n, "%s: expected a list, found %s", what, n.kind)
	}
	return n.items, nil
}

// str returns a scalar's value; a null node is "".
func str(n *node, what string) (string, error) {
	switch {
	case n == nil || n.kind == nullNode:
		return "", nil
	case n.kind != scalarNode:
		return "", perr(n, "%s: expected a single value, found %s", what, n.kind)
	}
	return n.value, nil
}

func parseGlobalWhite(n *node) ([]*addrPattern, error) {
	items, err := list(n, "globalWhiteRemoteAddresses")
	if err != nil {
		return nil, err
	}
	var out []*addrPattern
	for _, it := range items {
		s, err := str(it, "globalWhiteRemoteAddresses entry")
		if err != nil {
			return nil, err
		}
		p, err := parseAddrPattern(s)
		if err != nil {
			return nil, perr(it, "%v", err)
		}
		if !p.empty {
			out = append(out, p)
		}
	}
	return out, nil
}

func (r *Rules) parseAccounts(n *node) error {
	items, err := list(n, "accounts")
	if err != nil {
		return err
	}
	for _, it := range items {
		if it.kind != mapNode {
			return perr(it, "accounts entry: expected a mapping (accessKey: ..., secretKey: ...), found %s", it.kind)
		}
		a, err := parseAccount(it)
		if err != nil {
			return err
		}
		if r.Accounts[a.AccessKey] != nil {
			return perr(it, "accessKey %q is defined twice", a.AccessKey)
		}
		r.Accounts[a.AccessKey] = a
	}
	return nil
}

func parseAccount(m *node) (*Account, error) {
	if err := checkKeys(m, accountKeys); err != nil {
		return nil, err
	}
	a := &Account{DefaultTopicPerm: Deny, DefaultGroupPerm: Deny}
	var err error
	if a.AccessKey, err = requiredKey(m, "accessKey"); err != nil {
		return nil, err
	}
	if a.secretKey, err = requiredKey(m, "secretKey"); err != nil {
		return nil, err
	}
	if err := a.parseScalars(m); err != nil {
		return nil, err
	}
	if a.TopicPerms, err = resourcePerms(m, "topicPerms"); err != nil {
		return nil, err
	}
	if a.GroupPerms, err = resourcePerms(m, "groupPerms"); err != nil {
		return nil, err
	}
	return a, nil
}

func requiredKey(m *node, key string) (string, error) {
	v, err := str(m.lookup(key), key)
	if err != nil {
		return "", err
	}
	if len(v) < MinKeyLength {
		if v == "" {
			return "", perr(m, "account without %s", key)
		}
		return "", perr(m.lookup(key), "%s must be at least %d characters", key, MinKeyLength)
	}
	return v, nil
}

func (a *Account) parseScalars(m *node) error {
	white, err := str(m.lookup("whiteRemoteAddress"), "whiteRemoteAddress")
	if err != nil {
		return err
	}
	if a.White, err = parseAddrPattern(white); err != nil {
		return perr(m.lookup("whiteRemoteAddress"), "%v", err)
	}
	if n := m.lookup("admin"); n != nil {
		v, err := str(n, "admin")
		if err != nil {
			return err
		}
		switch strings.ToLower(v) {
		case "true":
			a.Admin = true
		case "false", "":
		default:
			return perr(n, "admin: %q is not true or false", v)
		}
	}
	for _, d := range []struct {
		key string
		p   *Perm
	}{{"defaultTopicPerm", &a.DefaultTopicPerm}, {"defaultGroupPerm", &a.DefaultGroupPerm}} {
		n := m.lookup(d.key)
		v, err := str(n, d.key)
		if err != nil || v == "" {
			if err != nil {
				return err
			}
			continue
		}
		if *d.p, err = parsePerm(v); err != nil {
			return perr(n, "%s: %v", d.key, err)
		}
	}
	return nil
}

// resourcePerms parses a list of "name=PERM".
func resourcePerms(m *node, key string) (map[string]Perm, error) {
	items, err := list(m.lookup(key), key)
	if err != nil || len(items) == 0 {
		return nil, err
	}
	out := make(map[string]Perm, len(items))
	for _, it := range items {
		s, err := str(it, key+" entry")
		if err != nil {
			return nil, err
		}
		name, perm, ok := strings.Cut(s, "=")
		name = strings.TrimSpace(name)
		if !ok || name == "" || strings.Contains(perm, "=") {
			return nil, perr(it, "%s: %q is not name=PERM (e.g. TopicA=PUB|SUB)", key, s)
		}
		p, err := parsePerm(perm)
		if err != nil {
			return nil, perr(it, "%s: %s: %v", key, name, err)
		}
		if _, dup := out[name]; dup {
			return nil, perr(it, "%s: %q is listed twice", key, name)
		}
		out[name] = p
	}
	return out, nil
}
