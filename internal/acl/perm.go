package acl

import (
	"fmt"
	"strings"
)

// Perm is a permission bit set, with RocketMQ's values.
type Perm uint8

// Permission bits. Deny overrides everything; Any is only ever needed (an
// owned PUB or SUB satisfies it), never granted.
const (
	Deny Perm = 1
	Any  Perm = 2
	Pub  Perm = 4
	Sub  Perm = 8
)

func (p Perm) String() string {
	switch p {
	case Deny:
		return "DENY"
	case Any:
		return "PUB or SUB"
	case Pub:
		return "PUB"
	case Sub:
		return "SUB"
	case Pub | Sub:
		return "PUB|SUB"
	}
	return fmt.Sprintf("Perm(%d)", uint8(p))
}

// parsePerm reads a permission as plain_acl.yml writes it. RocketMQ reads
// any other spelling as DENY; Keel refuses it, so that a typo does not
// silently lock an application out (or, for a default, let it in).
func parsePerm(s string) (Perm, error) {
	switch strings.TrimSpace(s) {
	case "PUB":
		return Pub, nil
	case "SUB":
		return Sub, nil
	case "PUB|SUB", "SUB|PUB":
		return Pub | Sub, nil
	case "DENY":
		return Deny, nil
	}
	return 0, fmt.Errorf("permission %q is not one of PUB, SUB, PUB|SUB, SUB|PUB, DENY", s)
}

// allows reports whether owned grants needed (RocketMQ's
// Permission.checkPermission).
func (owned Perm) allows(needed Perm) bool {
	if owned&Deny != 0 {
		return false
	}
	if needed&Any != 0 {
		return owned&(Pub|Sub) != 0
	}
	return needed&owned != 0
}
