package amqpmgmt

// The list query parameters of RabbitMQ's management API:
//
//	columns=a,b.c       only these fields (dotted: inside an object)
//	sort=f              by field f (dotted allowed), sort_reverse=true
//	name=s              only objects whose name contains s
//	                    (use_regex=true: matches the regular expression s)
//	page=n, page_size=m the nth page of m objects (m <= 500, default 100),
//	                    answered as RabbitMQ's page document
//
// A malformed parameter is answered 400.

import (
	"cmp"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"net"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// maxPageSize is RabbitMQ's largest page_size.
const maxPageSize = 500

// one answers a single object, keeping the requested columns.
func one(r request, o object) (any, error) {
	return pick(o, columns(r)), nil
}

// list answers a list after the query parameters.
func list(r request, items []object) (any, error) {
	q := r.URL.Query()
	total := len(items)
	if name := q.Get("name"); name != "" {
		match := func(s string) bool { return strings.Contains(s, name) }
		if q.Get("use_regex") == "true" {
			re, err := regexp.Compile(name)
			if err != nil {
				return nil, badRequest("name is not a regular expression: " + err.Error())
			}
			match = re.MatchString
		}
		items = slices.DeleteFunc(slices.Clone(items), func(o object) bool {
			s, _ := o["name"].(string)
			return !match(s)
		})
	}
	if f := q.Get("sort"); f != "" {
		path := strings.Split(f, ".")
		slices.SortStableFunc(items, func(x, y object) int { return compare(lookup(x, path), lookup(y, path)) })
	}
	if q.Get("sort_reverse") == "true" {
		slices.Reverse(items)
	}
	cols := columns(r)
	picked := func(items []object) []object {
		out := make([]object, len(items))
		for i, o := range items {
			out[i] = pick(o, cols)
		}
		return out
	}
	if !q.Has("page") && !q.Has("page_size") {
		return picked(items), nil
	}
	page, size := 1, 100
	var err error
	if s := q.Get("page"); s != "" {
		if page, err = strconv.Atoi(s); err != nil || page < 1 {
			return nil, badRequest("page must be a positive integer")
		}
	}
	if s := q.Get("page_size"); s != "" {
		if size, err = strconv.Atoi(s); err != nil || size < 1 || size > maxPageSize {
			return nil, badRequest("page_size must be an integer from 1 to 500")
		}
	}
	pages := (len(items) + size - 1) / size
	if page > max(pages, 1) {
		return nil, badRequest("page out of range")
	}
	from := min((page-1)*size, len(items))
	to := min(from+size, len(items))
	return object{"items": picked(items[from:to]), "page": page, "page_size": size, "page_count": pages,
		"item_count": to - from, "filtered_count": len(items), "total_count": total}, nil
}

// columns returns the requested columns, each as its path; nil: all.
func columns(r request) [][]string {
	s := r.URL.Query().Get("columns")
	if s == "" {
		return nil
	}
	var cols [][]string
	for _, c := range strings.Split(s, ",") {
		if c = strings.TrimSpace(c); c != "" {
			cols = append(cols, strings.Split(c, "."))
		}
	}
	return cols
}

// pick returns o with only the fields cols name (all with nil cols).
func pick(o object, cols [][]string) object {
	if cols == nil {
		return o
	}
	out := object{}
	for _, path := range cols {
		v, ok := lookupOK(o, path)
		if !ok {
			continue
		}
		dst := out
		for _, k := range path[:len(path)-1] {
			next, ok := dst[k].(object)
			if !ok {
				next = object{}
				dst[k] = next
			}
			dst = next
		}
		dst[path[len(path)-1]] = v
	}
	return out
}

func lookup(o object, path []string) any {
	v, _ := lookupOK(o, path)
	return v
}

func lookupOK(o object, path []string) (any, bool) {
	var v any = o
	for _, k := range path {
		m, ok := v.(object)
		if !ok {
			return nil, false
		}
		if v, ok = m[k]; !ok {
			return nil, false
		}
	}
	return v, true
}

// compare orders two field values: missing first, then numbers, then
// strings, then anything else as equal.
func compare(x, y any) int {
	rank := func(v any) (int, float64, string) {
		switch t := v.(type) {
		case nil:
			return 0, 0, ""
		case string:
			return 2, 0, t
		case bool:
			if t {
				return 1, 1, ""
			}
			return 1, 0, ""
		}
		if f, ok := number(v); ok {
			return 1, f, ""
		}
		return 3, 0, ""
	}
	rx, fx, sx := rank(x)
	ry, fy, sy := rank(y)
	if c := cmp.Compare(rx, ry); c != 0 {
		return c
	}
	if c := cmp.Compare(fx, fy); c != 0 {
		return c
	}
	return cmp.Compare(sx, sy)
}

func number(v any) (float64, bool) {
	switch t := v.(type) {
	case int:
		return float64(t), true
	case int64:
		return float64(t), true
	case uint64:
		return float64(t), true
	case uint32:
		return float64(t), true
	case uint16:
		return float64(t), true
	case uint8:
		return float64(t), true
	case int8:
		return float64(t), true
	case int16:
		return float64(t), true
	case int32:
		return float64(t), true
	case float32:
		return float64(t), true
	case float64:
		return t, true
	}
	return 0, false
}

func cmpStr(a, b string) int { return strings.Compare(a, b) }

func itoa(n int) string { return strconv.Itoa(n) }

func pathEscape(s string) string { return url.PathEscape(s) }

// argsDigest is a short digest of a binding's arguments.
func argsDigest(a map[string]any) string {
	b, _ := json.Marshal(a) // maps marshal with sorted keys: one digest per argument set
	sum := sha256.Sum256(b)
	return base64.RawURLEncoding.EncodeToString(sum[:9])
}

// splitAddr returns an address's host and port.
func splitAddr(a net.Addr) (string, int) {
	if t, ok := a.(*net.TCPAddr); ok {
		return t.IP.String(), t.Port
	}
	if a == nil {
		return "", 0
	}
	h, p, _ := net.SplitHostPort(a.String())
	n, _ := strconv.Atoi(p)
	return h, n
}
