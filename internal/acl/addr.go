package acl

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// addrPattern is a parsed remote address pattern (globalWhiteRemoteAddresses
// entries and whiteRemoteAddress values). RocketMQ's forms:
//
//	(empty)                  matches nothing
//	*  *.*.*.*  *:*:*:*:*:*:*:*   matches every address
//	192.168.0.1   ::1        one address (IPv4 or IPv6)
//	192.168.0.1,192.168.0.2  a list
//	192.168.0.{1,2}          a list sharing a prefix (IPv6: 2001:db8::{1,2})
//	192.168.1.*  192.168.*   any value of the first wildcard octet (and of all after it)
//	192.168.1.1-100          a range of one octet (later octets, if written, must be *)
//
// Octet ranges and wildcards are IPv4 only.
type addrPattern struct {
	src   string
	all   bool
	set   map[netip.Addr]struct{}
	rng   *octetRange
	empty bool
}

// octetRange matches IPv4 addresses whose first idx octets equal prefix and
// whose octet idx is in [lo, hi]; later octets are free.
type octetRange struct {
	prefix [3]byte
	idx    int // 1..3
	lo, hi int
}

func (p *addrPattern) String() string { return p.src }

// match reports whether ip (already unmapped) matches.
func (p *addrPattern) match(ip netip.Addr) bool {
	switch {
	case p.empty || !ip.IsValid():
		return false
	case p.all:
		return true
	case p.set != nil:
		_, ok := p.set[ip]
		return ok
	case p.rng != nil:
		if !ip.Is4() {
			return false
		}
		b := ip.As4()
		r := p.rng
		for i := 0; i < r.idx; i++ {
			if b[i] != r.prefix[i] {
				return false
			}
		}
		v := int(b[r.idx])
		return v >= r.lo && v <= r.hi
	}
	return false
}

func parseAddrPattern(s string) (*addrPattern, error) {
	s = strings.TrimSpace(s)
	p := &addrPattern{src: s}
	switch {
	case s == "":
		p.empty = true
		return p, nil
	case s == "*" || s == "*.*.*.*" || s == "*:*:*:*:*:*:*:*":
		p.all = true
		return p, nil
	case strings.HasSuffix(s, "}"):
		return p, p.parseBraces(s)
	case strings.Contains(s, ","):
		return p, p.parseList(strings.Split(s, ","))
	case strings.ContainsAny(s, "*-"):
		return p, p.parseRange(s)
	}
	return p, p.parseList([]string{s})
}

func (p *addrPattern) parseBraces(s string) error {
	open := strings.LastIndexByte(s, '{')
	if open < 1 || (s[open-1] != '.' && s[open-1] != ':') {
		return fmt.Errorf("address pattern %q: expected a prefix ending in '.' or ':' before '{'", s)
	}
	prefix, inner := s[:open], s[open+1:len(s)-1]
	if strings.ContainsAny(prefix, "{}*-,") {
		return fmt.Errorf("address pattern %q: only the last part may be {a,b}", s)
	}
	var addrs []string
	for _, x := range strings.Split(inner, ",") {
		addrs = append(addrs, prefix+strings.TrimSpace(x))
	}
	return p.parseList(addrs)
}

func (p *addrPattern) parseList(addrs []string) error {
	p.set = make(map[netip.Addr]struct{}, len(addrs))
	for _, a := range addrs {
		ip, err := parseIP(strings.TrimSpace(a))
		if err != nil {
			return fmt.Errorf("address pattern %q: %w", p.src, err)
		}
		p.set[ip] = struct{}{}
	}
	return nil
}

func parseIP(s string) (netip.Addr, error) {
	ip, err := netip.ParseAddr(s)
	if err != nil || ip.Zone() != "" {
		return netip.Addr{}, fmt.Errorf("%q is not an IP address", s)
	}
	if ip.Is4() && strings.Count(s, ".") != 3 {
		return netip.Addr{}, fmt.Errorf("%q is not a full IPv4 address", s)
	}
	return ip.Unmap(), nil
}

func (p *addrPattern) parseRange(s string) error {
	if strings.Contains(s, ":") {
		return fmt.Errorf("address pattern %q: IPv6 wildcards and ranges are not supported; list the addresses", s)
	}
	parts := strings.Split(s, ".")
	if len(parts) < 2 || len(parts) > 4 {
		return fmt.Errorf("address pattern %q: expected 2 to 4 dot-separated parts", s)
	}
	r := &octetRange{}
	for i, part := range parts {
		part = strings.TrimSpace(part)
		if r.idx > 0 {
			if part != "*" {
				return fmt.Errorf("address pattern %q: parts after a wildcard or range must be *", s)
			}
			continue
		}
		if v, ok := octet(part); ok {
			if i == 3 {
				return fmt.Errorf("address pattern %q: no wildcard or range", s)
			}
			r.prefix[i] = byte(v)
			continue
		}
		if i == 0 {
			return fmt.Errorf("address pattern %q: the first octet must be a number", s)
		}
		lo, hi, err := octetSpan(part)
		if err != nil {
			return fmt.Errorf("address pattern %q: %w", s, err)
		}
		r.idx, r.lo, r.hi = i, lo, hi
	}
	if r.idx == 0 {
		return fmt.Errorf("address pattern %q: no wildcard or range", s)
	}
	p.rng = r
	return nil
}

// octetSpan parses "*" or "lo-hi".
func octetSpan(s string) (lo, hi int, err error) {
	if s == "*" {
		return 0, 255, nil
	}
	a, b, ok := strings.Cut(s, "-")
	lo, ok1 := octet(strings.TrimSpace(a))
	hi, ok2 := octet(strings.TrimSpace(b))
	if !ok || !ok1 || !ok2 || lo > hi {
		return 0, 0, fmt.Errorf("%q is not *, a number 0-255 or a range lo-hi", s)
	}
	return lo, hi, nil
}

func octet(s string) (int, bool) {
	if s == "" || len(s) > 3 || strings.TrimLeft(s, "0123456789") != "" {
		return 0, false
	}
	v, err := strconv.Atoi(s)
	return v, err == nil && v <= 255
}

// remoteIP extracts the peer IP of a connection address.
func remoteIP(a net.Addr) netip.Addr {
	if a == nil {
		return netip.Addr{}
	}
	if t, ok := a.(*net.TCPAddr); ok {
		ip, _ := netip.AddrFromSlice(t.IP)
		return ip.Unmap()
	}
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		return netip.Addr{}
	}
	return ap.Addr().Unmap()
}
