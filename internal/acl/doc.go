// Package acl implements RocketMQ ACL 1.0 access control for the broker:
// the plain_acl.yml file format, the HMAC-SHA1 request signature the
// official clients compute when given credentials, and the mapping of
// request codes to the topics and groups they touch.
//
// # File format
//
// plain_acl.yml is read with a small, strict YAML-subset parser (block
// mappings and lists, quoted and plain scalars, [a, b] lists, comments):
//
//	globalWhiteRemoteAddresses:      # addresses trusted without credentials
//	  - 10.10.103.*
//	accounts:
//	  - accessKey: RocketMQ          # at least 7 characters
//	    secretKey: 12345678          # at least 7 characters
//	    whiteRemoteAddress:          # this account needs no signature from here
//	    admin: false                 # admin codes (create/delete topic, group)
//	    defaultTopicPerm: DENY       # for topics not listed (default DENY)
//	    defaultGroupPerm: SUB        # for groups not listed (default DENY)
//	    topicPerms: [topicA=DENY, topicB=PUB|SUB, topicC=SUB]
//	    groupPerms:
//	      - groupA=DENY
//
// Unknown keys, bad permissions, bad address patterns, short keys and
// duplicate access keys are errors naming the line.
//
// # Checking a request
//
// Authorizer.Check follows RocketMQ's PlainPermissionManager: a global
// white-listed address passes; otherwise the request must carry a known
// AccessKey; a remote address matching that account's whiteRemoteAddress
// passes without a signature; otherwise the Signature must verify (Sign)
// and the account must hold the permission each touched resource needs
// (needs). Wrap puts the check in front of any remoting.Handler and turns
// a denial into a NO_PERMISSION (16) response; the broker knows nothing of
// it.
//
// # Concurrency
//
// An Authorizer is safe for concurrent use. The rules are an immutable
// *Rules swapped atomically by Reload (called by Run every PollInterval);
// a file that fails to read or parse keeps the rules in force. Update
// (write.go: front doors' admin APIs changing topic and group rules)
// rewrites the file durably from changed rules and swaps them in,
// serialised with Reload.
package acl
