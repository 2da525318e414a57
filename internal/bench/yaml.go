package bench

import (
	"errors"
	"fmt"
	"strings"
)

// The workload files are a flat subset of YAML that the standard library
// can do without a YAML module:
//
//	# a comment line
//	name: sync-unbatched        # a trailing comment after a space
//	messageSize: 1KiB
//	description: "quoted: with # and : inside"
//	note: 'single quotes; '' is a quote'
//
// One "key: value" pair per line; keys are letters, digits, '_' and '-';
// values are plain scalars (trailing " #..." comment and surrounding spaces
// removed) or a double-quoted string (escapes \" \\ \n \t) or a
// single-quoted string ('' for a quote). Blank lines, comment lines and a
// leading "---" document marker are skipped. Everything else of YAML --
// indentation, nesting, lists, anchors, multi-line scalars, several
// documents -- is rejected with the line number, never guessed at. A
// repeated key is an error.

// ErrYAML is wrapped by every parse error of the YAML subset.
var ErrYAML = errors.New("bench: workload file")

// KeyValue is one "key: value" line.
type KeyValue struct {
	Key, Value string
	Line       int
}

// ParseFlatYAML parses src in the flat YAML subset described above.
func ParseFlatYAML(src string) ([]KeyValue, error) {
	var out []KeyValue
	seen := make(map[string]int)
	first := firstContentLine(src)
	for i, line := range strings.Split(src, "\n") {
		n := i + 1
		line = strings.TrimSuffix(line, "\r")
		kv, skip, err := parseYAMLLine(line, n, i == first)
		if err != nil {
			return nil, err
		}
		if skip {
			continue
		}
		if prev, dup := seen[kv.Key]; dup {
			return nil, fmt.Errorf("%w: line %d: key %q repeated (first on line %d)", ErrYAML, n, kv.Key, prev)
		}
		seen[kv.Key] = n
		out = append(out, kv)
	}
	return out, nil
}

// firstContentLine is the index of the first line that is not blank or a
// comment (where "---" may stand).
func firstContentLine(src string) int {
	for i, line := range strings.Split(src, "\n") {
		t := strings.TrimSpace(line)
		if t != "" && !strings.HasPrefix(t, "#") {
			return i
		}
	}
	return -1
}

func parseYAMLLine(line string, n int, first bool) (kv KeyValue, skip bool, err error) {
	t := strings.TrimSpace(line)
	switch {
	case t == "" || strings.HasPrefix(t, "#"):
		return kv, true, nil
	case t == "---" && first:
		return kv, true, nil
	case line[0] == ' ' || line[0] == '\t':
		return kv, false, fmt.Errorf("%w: line %d: indented line: nesting is not supported (flat key: value only)", ErrYAML, n)
	case strings.HasPrefix(t, "- ") || t == "-":
		return kv, false, fmt.Errorf("%w: line %d: lists are not supported (flat key: value only)", ErrYAML, n)
	}
	colon := strings.IndexByte(t, ':')
	if colon < 0 {
		return kv, false, fmt.Errorf("%w: line %d: want \"key: value\", got %q", ErrYAML, n, t)
	}
	kv.Key, kv.Line = t[:colon], n
	if !validYAMLKey(kv.Key) {
		return kv, false, fmt.Errorf("%w: line %d: bad key %q (letters, digits, '_' and '-' only)", ErrYAML, n, kv.Key)
	}
	rest := t[colon+1:]
	if rest != "" && rest[0] != ' ' && rest[0] != '\t' {
		return kv, false, fmt.Errorf("%w: line %d: want a space after \"%s:\"", ErrYAML, n, kv.Key)
	}
	kv.Value, err = parseYAMLValue(strings.TrimSpace(rest))
	if err != nil {
		return kv, false, fmt.Errorf("%w: line %d: key %s: %v", ErrYAML, n, kv.Key, err)
	}
	return kv, false, nil
}

func validYAMLKey(k string) bool {
	if k == "" {
		return false
	}
	for _, c := range k {
		ok := c == '_' || c == '-' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
		if !ok {
			return false
		}
	}
	return true
}

// parseYAMLValue parses a trimmed value: quoted, or plain with an optional
// trailing comment.
func parseYAMLValue(v string) (string, error) {
	if v == "" {
		return "", nil
	}
	switch v[0] {
	case '"':
		return parseDoubleQuoted(v)
	case '\'':
		return parseSingleQuoted(v)
	case '[', '{', '&', '*', '!', '|', '>', '@', '`':
		return "", fmt.Errorf("value %q: flow collections, anchors, tags and block scalars are not supported; quote it", v)
	}
	if i := strings.Index(v, " #"); i >= 0 {
		v = v[:i]
	}
	if i := strings.Index(v, "\t#"); i >= 0 {
		v = v[:i]
	}
	return strings.TrimSpace(v), nil
}

func parseDoubleQuoted(v string) (string, error) {
	var b strings.Builder
	for i := 1; i < len(v); i++ {
		c := v[i]
		switch {
		case c == '"':
			return b.String(), checkAfterQuote(v[i+1:])
		case c == '\\' && i+1 < len(v):
			i++
			switch v[i] {
			case '"', '\\':
				b.WriteByte(v[i])
			case 'n':
				b.WriteByte('\n')
			case 't':
				b.WriteByte('\t')
			default:
				return "", fmt.Errorf("unsupported escape \\%c", v[i])
			}
		default:
			b.WriteByte(c)
		}
	}
	return "", errors.New("unterminated double-quoted string")
}

func parseSingleQuoted(v string) (string, error) {
	var b strings.Builder
	for i := 1; i < len(v); i++ {
		if v[i] != '\'' {
			b.WriteByte(v[i])
			continue
		}
		if i+1 < len(v) && v[i+1] == '\'' {
			b.WriteByte('\'')
			i++
			continue
		}
		return b.String(), checkAfterQuote(v[i+1:])
	}
	return "", errors.New("unterminated single-quoted string")
}

// checkAfterQuote allows only spaces and a comment after a closing quote.
func checkAfterQuote(rest string) error {
	t := strings.TrimSpace(rest)
	if t == "" || (strings.HasPrefix(t, "#") && rest != t) {
		return nil
	}
	return fmt.Errorf("unexpected %q after the closing quote", t)
}
