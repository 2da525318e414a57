package kafka

// ACLs: DescribeAcls, CreateAcls and DeleteAcls over Keel's access
// control, the accounts of plain_acl.yml (RocketMQ ACL 1.0), when
// Config.ACL is a RuleEditor. The mapping:
//
//	principal User:<accessKey>      the account (accounts are made in the
//	                                file: they need a secretKey)
//	TOPIC/GROUP <name> LITERAL      topicPerms/groupPerms name=...
//	TOPIC/GROUP * LITERAL           defaultTopicPerm/defaultGroupPerm
//	READ, WRITE, ALL                SUB, PUB, PUB|SUB
//	DESCRIBE                        included in PUB and SUB: created only
//	                                where READ or WRITE is held already
//	name=DENY                       described as ALL DENY
//	admin: true                     described as CLUSTER kafka-cluster ALL
//	                                ALLOW (and, without any rule, TOPIC
//	                                and GROUP * ALL ALLOW: RocketMQ lets
//	                                such an admin use everything)
//	host                            * only
//
// What the file cannot say is refused per entry (INVALID_REQUEST with the
// reason): DENY, PREFIXED patterns, hosts other than *, CLUSTER,
// TRANSACTIONAL_ID, DELEGATION_TOKEN and USER resources, other operations,
// unknown accounts, and a first rule for an admin without rules (it would
// take away its access to everything else). Creating never takes away: a
// new rule starts from what the default grants. Deleting never grants: a
// rule left with no permission becomes DENY where a default would
// otherwise apply. Creations and deletions need an admin account, as does
// describing; they rewrite plain_acl.yml durably (RuleEditor.EditRules)
// before they are answered. Without access control (aclEnable=false) the
// three answer SECURITY_DISABLED (54), as Kafka without an authorizer.

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// Grant is what an account's rule grants on a topic or group
// (plain_acl.yml's PUB, SUB, PUB|SUB, DENY).
type Grant uint8

const (
	GrantPub Grant = 1 << iota
	GrantSub
	GrantDeny
)

// AccountRules is one account's rules as the ACL APIs see them.
type AccountRules struct {
	User                       string
	Admin                      bool
	DefaultTopic, DefaultGroup Grant
	Topics, Groups             map[string]Grant
}

// RuleEditor is implemented by Accounts whose rules the ACL and SCRAM
// APIs may read and change. Both must be safe for concurrent use.
type RuleEditor interface {
	// Rules returns a copy of every account's rules.
	Rules() []AccountRules
	// EditRules calls edit with a copy of every account's rules, by
	// user; if edit returns nil, the changed topic and group rules (and
	// defaults: User and Admin are not changed) are persisted durably and
	// put in force before EditRules returns.
	EditRules(edit func(map[string]*AccountRules) error) error
}

const (
	errSecurityDisabled int16 = 54
	clusterName               = "kafka-cluster"
	aclWildcard               = "*"
	userPrefix                = "User:"
)

// aclBinding is one Kafka ACL binding (always LITERAL, host *).
type aclBinding struct {
	resType kmsg.ACLResourceType
	name    string
	user    string
	op      kmsg.ACLOperation
	perm    kmsg.ACLPermissionType
}

// bindingsOf lists an account's rules as Kafka ACL bindings.
func bindingsOf(a *AccountRules) []aclBinding {
	var out []aclBinding
	add := func(t kmsg.ACLResourceType, name string, op kmsg.ACLOperation, perm kmsg.ACLPermissionType) {
		out = append(out, aclBinding{t, name, a.User, op, perm})
	}
	grant := func(t kmsg.ACLResourceType, name string, g Grant) {
		switch {
		case g&GrantDeny != 0:
			add(t, name, kmsg.ACLOperationAll, kmsg.ACLPermissionTypeDeny)
		default:
			if g&GrantSub != 0 {
				add(t, name, kmsg.ACLOperationRead, kmsg.ACLPermissionTypeAllow)
			}
			if g&GrantPub != 0 {
				add(t, name, kmsg.ACLOperationWrite, kmsg.ACLPermissionTypeAllow)
			}
		}
	}
	if a.Admin {
		add(kmsg.ACLResourceTypeCluster, clusterName, kmsg.ACLOperationAll, kmsg.ACLPermissionTypeAllow)
		if adminWithoutRules(a) {
			add(kmsg.ACLResourceTypeTopic, aclWildcard, kmsg.ACLOperationAll, kmsg.ACLPermissionTypeAllow)
			add(kmsg.ACLResourceTypeGroup, aclWildcard, kmsg.ACLOperationAll, kmsg.ACLPermissionTypeAllow)
			return out
		}
	}
	for _, r := range []struct {
		t     kmsg.ACLResourceType
		def   Grant
		rules map[string]Grant
	}{{kmsg.ACLResourceTypeTopic, a.DefaultTopic, a.Topics}, {kmsg.ACLResourceTypeGroup, a.DefaultGroup, a.Groups}} {
		if r.def&GrantDeny == 0 {
			grant(r.t, aclWildcard, r.def)
		}
		for _, name := range slices.Sorted(maps.Keys(r.rules)) {
			grant(r.t, name, r.rules[name])
		}
	}
	return out
}

func adminWithoutRules(a *AccountRules) bool {
	return a.Admin && len(a.Topics) == 0 && len(a.Groups) == 0
}

// aclFilter is a DescribeAcls or DeleteAcls filter.
type aclFilter struct {
	resType   kmsg.ACLResourceType
	name      *string
	pattern   kmsg.ACLResourcePatternType
	principal *string
	host      *string
	op        kmsg.ACLOperation
	perm      kmsg.ACLPermissionType
}

// check reports what is malformed in f ("": nothing).
func (f aclFilter) check() string {
	switch {
	case f.resType == kmsg.ACLResourceTypeUnknown || f.resType > kmsg.ACLResourceTypeUser:
		return "unknown resource type"
	case f.pattern == kmsg.ACLResourcePatternTypeUnknown || f.pattern > kmsg.ACLResourcePatternTypePrefixed:
		return "unknown resource pattern type"
	case f.op == kmsg.ACLOperationUnknown || f.op > kmsg.ACLOperationDescribeTokens:
		return "unknown operation"
	case f.perm == kmsg.ACLPermissionTypeUnknown || f.perm > kmsg.ACLPermissionTypeAllow:
		return "unknown permission type"
	}
	return ""
}

func (f aclFilter) matches(b aclBinding) bool {
	if f.resType != kmsg.ACLResourceTypeAny && f.resType != b.resType {
		return false
	}
	switch f.pattern {
	case kmsg.ACLResourcePatternTypePrefixed:
		return false // no binding is prefixed
	case kmsg.ACLResourcePatternTypeMatch:
		if f.name != nil && *f.name != b.name && b.name != aclWildcard {
			return false
		}
	default: // ANY, LITERAL: the name as given
		if f.name != nil && *f.name != b.name {
			return false
		}
	}
	return (f.principal == nil || *f.principal == userPrefix+b.user) &&
		(f.host == nil || *f.host == aclWildcard) &&
		(f.op == kmsg.ACLOperationAny || f.op == b.op) &&
		(f.perm == kmsg.ACLPermissionTypeAny || f.perm == b.perm)
}

// ruleEditor returns the editor of the access control, or the code and
// message that answer without one.
func (s *Server) ruleEditor() (RuleEditor, int16, string) {
	if s.cfg.ACL == nil {
		return nil, errSecurityDisabled, "access control is off (aclEnable=false): there are no ACLs, every client may do everything"
	}
	ed, ok := s.cfg.ACL.(RuleEditor)
	if !ok {
		return nil, errSecurityDisabled, "this broker's access control does not expose its rules"
	}
	return ed, errNone, ""
}

func (s *Server) describeACLs(req *kmsg.DescribeACLsRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.DescribeACLsResponse)
	ed, code, msg := s.ruleEditor()
	f := aclFilter{req.ResourceType, req.ResourceName, req.ResourcePatternType, req.Principal, req.Host, req.Operation, req.PermissionType}
	if code == errNone {
		if m := f.check(); m != "" {
			code, msg = errInvalidRequest, m
		}
	}
	if code != errNone {
		resp.ErrorCode, resp.ErrorMessage = code, kmsg.StringPtr(msg)
		return resp
	}
	type key struct {
		t    kmsg.ACLResourceType
		name string
	}
	byRes := map[key]int{}
	rules := ed.Rules()
	slices.SortFunc(rules, func(a, b AccountRules) int { return strings.Compare(a.User, b.User) })
	for i := range rules {
		for _, b := range bindingsOf(&rules[i]) {
			if !f.matches(b) {
				continue
			}
			k := key{b.resType, b.name}
			j, ok := byRes[k]
			if !ok {
				j = len(resp.Resources)
				byRes[k] = j
				rr := kmsg.NewDescribeACLsResponseResource()
				rr.ResourceType, rr.ResourceName, rr.ResourcePatternType = b.resType, b.name, kmsg.ACLResourcePatternTypeLiteral
				resp.Resources = append(resp.Resources, rr)
			}
			a := kmsg.NewDescribeACLsResponseResourceACL()
			a.Principal, a.Host, a.Operation, a.PermissionType = userPrefix+b.user, aclWildcard, b.op, b.perm
			resp.Resources[j].ACLs = append(resp.Resources[j].ACLs, a)
		}
	}
	return resp
}

// errNoChange ends an edit that changed nothing (nothing is written).
var errNoChange = errors.New("no change")

func (s *Server) createACLs(req *kmsg.CreateACLsRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.CreateACLsResponse)
	resp.Results = make([]kmsg.CreateACLsResponseResult, len(req.Creations))
	ed, code, msg := s.ruleEditor()
	if code != errNone {
		for i := range resp.Results {
			resp.Results[i].ErrorCode, resp.Results[i].ErrorMessage = code, kmsg.StringPtr(msg)
		}
		return resp
	}
	err := ed.EditRules(func(accts map[string]*AccountRules) error {
		changed := false
		// DESCRIBE last: it holds where a READ or WRITE of the same
		// request grants it (kafka-acls.sh sends them in any order).
		for _, describe := range []bool{false, true} {
			for i, c := range req.Creations {
				if (c.Operation == kmsg.ACLOperationDescribe) != describe {
					continue
				}
				ch, m := createACL(accts, c)
				if m != "" {
					resp.Results[i].ErrorCode, resp.Results[i].ErrorMessage = errInvalidRequest, kmsg.StringPtr(m)
				}
				changed = changed || ch
			}
		}
		if !changed {
			return errNoChange
		}
		return nil
	})
	if err != nil && !errors.Is(err, errNoChange) {
		s.log.Error("kafka: CreateAcls: the rules could not be written", "err", err)
		for i := range resp.Results {
			if resp.Results[i].ErrorCode == errNone {
				resp.Results[i].ErrorCode, resp.Results[i].ErrorMessage = errUnknownServer, kmsg.StringPtr("the ACL file could not be rewritten: "+err.Error())
			}
		}
	}
	return resp
}

// createACL applies one creation to accts: whether it changed them, or
// why it is refused.
func createACL(accts map[string]*AccountRules, c kmsg.CreateACLsRequestCreation) (changed bool, refused string) {
	switch {
	case c.PermissionType == kmsg.ACLPermissionTypeDeny:
		return false, "DENY bindings cannot be created: a DENY in plain_acl.yml replaces an account's permissions on one resource, where Kafka's overrides every ALLOW; write name=DENY in plain_acl.yml"
	case c.PermissionType != kmsg.ACLPermissionTypeAllow:
		return false, "the permission type must be ALLOW"
	case c.ResourcePatternType == kmsg.ACLResourcePatternTypePrefixed:
		return false, "PREFIXED patterns cannot be expressed: plain_acl.yml names each topic and group (use LITERAL, or * for the default)"
	case c.ResourcePatternType != kmsg.ACLResourcePatternTypeLiteral:
		return false, "the resource pattern type must be LITERAL"
	case c.Host != aclWildcard:
		return false, "hosts other than * cannot be expressed: an account's addresses are whiteRemoteAddress and globalWhiteRemoteAddresses in plain_acl.yml"
	case c.ResourceType == kmsg.ACLResourceTypeCluster:
		return false, "CLUSTER bindings cannot be created: cluster operations need an admin account (admin: true in plain_acl.yml)"
	case c.ResourceType != kmsg.ACLResourceTypeTopic && c.ResourceType != kmsg.ACLResourceTypeGroup:
		return false, fmt.Sprintf("%s resources have no counterpart in plain_acl.yml (TOPIC and GROUP only)", c.ResourceType)
	case !strings.HasPrefix(c.Principal, userPrefix):
		return false, "the principal must be User:<accessKey>"
	}
	if m := checkRuleName(c.ResourceName); m != "" {
		return false, m
	}
	user := strings.TrimPrefix(c.Principal, userPrefix)
	a := accts[user]
	if a == nil {
		return false, fmt.Sprintf("no account %q in plain_acl.yml (accounts, with their secretKey, are added to the file)", user)
	}
	if adminWithoutRules(a) {
		return false, fmt.Sprintf("%s is an admin without topic or group rules, so it may use every topic and group; a first rule would limit it to its rules (RocketMQ's rule): edit plain_acl.yml", user)
	}
	var bits Grant
	switch c.Operation {
	case kmsg.ACLOperationRead:
		bits = GrantSub
	case kmsg.ACLOperationWrite:
		bits = GrantPub
	case kmsg.ACLOperationAll:
		bits = GrantPub | GrantSub
	case kmsg.ACLOperationDescribe:
		if holds(a, c.ResourceType, c.ResourceName) {
			return false, "" // PUB and SUB include it
		}
		return false, "DESCRIBE alone cannot be granted: in plain_acl.yml PUB (WRITE) and SUB (READ) each include it; grant READ or WRITE"
	default:
		return false, fmt.Sprintf("%s cannot be granted on a %s: plain_acl.yml grants PUB (WRITE) and SUB (READ); admin operations need an admin account", c.Operation, c.ResourceType)
	}
	def, rules := &a.DefaultTopic, &a.Topics
	if c.ResourceType == kmsg.ACLResourceTypeGroup {
		def, rules = &a.DefaultGroup, &a.Groups
	}
	if c.ResourceName == aclWildcard {
		old := *def
		if old&GrantDeny != 0 {
			*def = bits
		} else {
			*def |= bits
		}
		return *def != old, ""
	}
	old, ok := (*rules)[c.ResourceName]
	if ok && old&GrantDeny != 0 {
		return false, fmt.Sprintf("%s's rule for %s is DENY (an ALL DENY binding, which wins): delete it first", user, c.ResourceName)
	}
	if !ok && *def&GrantDeny == 0 {
		old = *def // a rule overrides the default: it keeps what the default gave
	}
	if *rules == nil {
		*rules = map[string]Grant{}
	}
	(*rules)[c.ResourceName] = old | bits
	return !ok || old|bits != old, ""
}

// holds reports whether a holds PUB or SUB on the named resource (its
// rule, else its default).
func holds(a *AccountRules, t kmsg.ACLResourceType, name string) bool {
	def, rules := a.DefaultTopic, a.Topics
	if t == kmsg.ACLResourceTypeGroup {
		def, rules = a.DefaultGroup, a.Groups
	}
	g, ok := rules[name]
	if !ok || name == aclWildcard {
		g = def
	}
	return g&GrantDeny == 0 && g&(GrantPub|GrantSub) != 0
}

// checkRuleName reports why name cannot be a plain_acl.yml rule ("": it
// can).
func checkRuleName(name string) string {
	switch {
	case name == "":
		return "the resource name is empty"
	case strings.TrimSpace(name) != name || strings.ContainsAny(name, "=\n\r\t"):
		return "the resource name cannot be written in plain_acl.yml (it contains '=', a control character or surrounding spaces)"
	}
	return ""
}

func (s *Server) deleteACLs(req *kmsg.DeleteACLsRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.DeleteACLsResponse)
	resp.Results = make([]kmsg.DeleteACLsResponseResult, len(req.Filters))
	ed, code, msg := s.ruleEditor()
	if code != errNone {
		for i := range resp.Results {
			resp.Results[i].ErrorCode, resp.Results[i].ErrorMessage = code, kmsg.StringPtr(msg)
		}
		return resp
	}
	err := ed.EditRules(func(accts map[string]*AccountRules) error {
		changed := false
		users := slices.Sorted(maps.Keys(accts))
		for i, df := range req.Filters {
			f := aclFilter{df.ResourceType, df.ResourceName, df.ResourcePatternType, df.Principal, df.Host, df.Operation, df.PermissionType}
			if m := f.check(); m != "" {
				resp.Results[i].ErrorCode, resp.Results[i].ErrorMessage = errInvalidRequest, kmsg.StringPtr(m)
				continue
			}
			for _, u := range users {
				a := accts[u]
				for _, b := range bindingsOf(a) {
					if !f.matches(b) {
						continue
					}
					m := kmsg.NewDeleteACLsResponseResultMatchingACL()
					m.ResourceType, m.ResourceName, m.ResourcePatternType = b.resType, b.name, kmsg.ACLResourcePatternTypeLiteral
					m.Principal, m.Host, m.Operation, m.PermissionType = userPrefix+b.user, aclWildcard, b.op, b.perm
					if refused := deleteBinding(a, b); refused != "" {
						m.ErrorCode, m.ErrorMessage = errInvalidRequest, kmsg.StringPtr(refused)
					} else {
						changed = true
					}
					resp.Results[i].MatchingACLs = append(resp.Results[i].MatchingACLs, m)
				}
			}
		}
		if !changed {
			return errNoChange
		}
		return nil
	})
	if err != nil && !errors.Is(err, errNoChange) {
		s.log.Error("kafka: DeleteAcls: the rules could not be written", "err", err)
		for i := range resp.Results {
			resp.Results[i].ErrorCode, resp.Results[i].ErrorMessage = errUnknownServer, kmsg.StringPtr("the ACL file could not be rewritten: "+err.Error())
			resp.Results[i].MatchingACLs = nil
		}
	}
	return resp
}

// deleteBinding removes b, one of a's bindings, from a's rules, or says
// why not. It never grants: a rule left without permission is dropped
// where the default is DENY and becomes DENY otherwise; an admin's last
// rule stays (without rules an admin may use everything).
func deleteBinding(a *AccountRules, b aclBinding) string {
	if b.resType == kmsg.ACLResourceTypeCluster || adminWithoutRules(a) {
		return "an admin account's access is admin: true in plain_acl.yml; change it there"
	}
	def, rules := &a.DefaultTopic, a.Topics
	if b.resType == kmsg.ACLResourceTypeGroup {
		def, rules = &a.DefaultGroup, a.Groups
	}
	var bits Grant
	switch b.op {
	case kmsg.ACLOperationRead:
		bits = GrantSub
	case kmsg.ACLOperationWrite:
		bits = GrantPub
	}
	if b.name == aclWildcard {
		if *def &^= bits; *def == 0 {
			*def = GrantDeny
		}
		return ""
	}
	old := rules[b.name]
	g := old &^ bits
	if b.perm == kmsg.ACLPermissionTypeDeny {
		g = 0 // the DENY itself goes
	}
	if g != 0 {
		rules[b.name] = g
		return ""
	}
	delete(rules, b.name)
	if adminWithoutRules(a) {
		rules[b.name] = old
		return "this is the admin account's last rule: an admin without rules may use every topic and group (RocketMQ's rule); edit plain_acl.yml"
	}
	if b.perm != kmsg.ACLPermissionTypeDeny && *def&GrantDeny == 0 {
		rules[b.name] = GrantDeny // the default would grant more
	}
	return ""
}

// aclDenied answers an ACL, SCRAM or quota request of an account that is
// not an admin (CLUSTER_AUTHORIZATION_FAILED); nil for other requests.
func aclDenied(body kmsg.Request, msg *string) kmsg.Response {
	switch b := body.(type) {
	case *kmsg.DescribeACLsRequest:
		r := b.ResponseKind().(*kmsg.DescribeACLsResponse)
		r.ErrorCode, r.ErrorMessage = errClusterAuthorization, msg
		return r
	case *kmsg.CreateACLsRequest:
		r := b.ResponseKind().(*kmsg.CreateACLsResponse)
		for range b.Creations {
			r.Results = append(r.Results, kmsg.CreateACLsResponseResult{ErrorCode: errClusterAuthorization, ErrorMessage: msg})
		}
		return r
	case *kmsg.DeleteACLsRequest:
		r := b.ResponseKind().(*kmsg.DeleteACLsResponse)
		for range b.Filters {
			r.Results = append(r.Results, kmsg.DeleteACLsResponseResult{ErrorCode: errClusterAuthorization, ErrorMessage: msg})
		}
		return r
	}
	if r := scramDenied(body, msg); r != nil {
		return r
	}
	return quotaDenied(body, msg)
}
