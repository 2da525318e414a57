package acl

// Rewriting the ACL file: front doors whose admin APIs change the
// accounts' topic and group rules (the Kafka door's CreateAcls and
// DeleteAcls) call Update, which writes the whole file anew from the
// rules (Marshal: every value single-quoted, accounts by accessKey,
// comments and dataVersion not kept), durably (a temporary file synced
// and renamed over it), and installs the rules at once; the poll then
// finds the content it already has.

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/keelmq/keel/internal/vfs"
)

// Clone returns a deep copy of r.
func (r *Rules) Clone() *Rules {
	c := &Rules{GlobalWhite: slices.Clone(r.GlobalWhite), Accounts: make(map[string]*Account, len(r.Accounts))}
	for k, a := range r.Accounts {
		b := *a
		b.TopicPerms, b.GroupPerms = maps.Clone(a.TopicPerms), maps.Clone(a.GroupPerms)
		c.Accounts[k] = &b
	}
	return c
}

// yamlQuote single-quotes s (” stands for ').
func yamlQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// Marshal writes r in plain_acl.yml's format; Parse reads it back as r.
func (r *Rules) Marshal() []byte {
	var b strings.Builder
	b.WriteString("# Written by keel (the accounts' topic and group rules were changed through an admin API).\n")
	b.WriteString("globalWhiteRemoteAddresses:\n")
	for _, p := range r.GlobalWhite {
		fmt.Fprintf(&b, "  - %s\n", yamlQuote(p.src))
	}
	b.WriteString("accounts:\n")
	for _, k := range slices.Sorted(maps.Keys(r.Accounts)) {
		a := r.Accounts[k]
		fmt.Fprintf(&b, "  - accessKey: %s\n", yamlQuote(a.AccessKey))
		fmt.Fprintf(&b, "    secretKey: %s\n", yamlQuote(a.secretKey))
		if a.White != nil && a.White.src != "" {
			fmt.Fprintf(&b, "    whiteRemoteAddress: %s\n", yamlQuote(a.White.src))
		}
		fmt.Fprintf(&b, "    admin: %t\n", a.Admin)
		fmt.Fprintf(&b, "    defaultTopicPerm: %s\n", a.DefaultTopicPerm)
		fmt.Fprintf(&b, "    defaultGroupPerm: %s\n", a.DefaultGroupPerm)
		for _, rp := range []struct {
			key   string
			perms map[string]Perm
		}{{"topicPerms", a.TopicPerms}, {"groupPerms", a.GroupPerms}} {
			if len(rp.perms) == 0 {
				continue
			}
			fmt.Fprintf(&b, "    %s:\n", rp.key)
			for _, name := range slices.Sorted(maps.Keys(rp.perms)) {
				fmt.Fprintf(&b, "      - %s\n", yamlQuote(name+"="+rp.perms[name].String()))
			}
		}
	}
	return []byte(b.String())
}

// ErrNoFile is returned by Update for rules not read from a file.
var ErrNoFile = errors.New("acl: the rules were not read from a file")

// Update calls change with a copy of the rules in force (the file's, if
// it changed since it was last read and parses; if it does not parse,
// Update fails and changes nothing); if change returns
// nil, the changed rules are checked (written and parsed back), written
// over the file durably and installed, all before Update returns. Updates
// and reloads are serialised. Rules made by NewWithRules (no file) are
// changed in memory only.
func (a *Authorizer) Update(change func(*Rules) error) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cfg.Path != "" { // start from the file: an edit the poll has not seen yet is kept
		data, err := a.cfg.ReadFile(a.cfg.Path)
		if err != nil {
			return fmt.Errorf("acl: read ACL file: %w", err)
		}
		if sha256.Sum256(data) != a.loaded {
			r, err := Parse(a.cfg.Path, data)
			if err != nil {
				return fmt.Errorf("acl: the ACL file was changed and does not parse; fix it first: %w", err)
			}
			a.install(r, data)
		}
	}
	r := a.rules.Load().Clone()
	if err := change(r); err != nil {
		return err
	}
	data := r.Marshal()
	parsed, err := Parse(a.cfg.Path, data)
	if err != nil {
		return fmt.Errorf("acl: the changed rules cannot be written: %w", err)
	}
	if a.cfg.Path == "" {
		a.rules.Store(parsed)
		return nil
	}
	fs := a.cfg.FS
	if fs == nil {
		fs = vfs.OS{}
	}
	if err := vfs.WriteFileDurable(fs, a.cfg.Path, data, 0o600); err != nil {
		return fmt.Errorf("acl: rewrite the ACL file: %w", err)
	}
	a.install(parsed, data)
	return nil
}
