package acl

import (
	"fmt"
	"strings"
)

// This file reads the YAML subset plain_acl.yml files use: block mappings
// and block sequences nested by indentation, plain / 'single' / "double"
// quoted scalars, flow sequences of scalars ([a, b]) and comments. Anything
// else (anchors, aliases, tags, block scalars, flow mappings, multi-line
// scalars, tabs in indentation) is an error naming the line, never a guess.
// Errors never quote the line's text: it may hold a secret key.

// Limits of the parser, so that hostile input costs bounded work.
const (
	MaxFileBytes = 1 << 20 // an ACL file larger than this is refused
	maxDepth     = 16      // nesting of sequences and mappings
)

type nodeKind int

const (
	nullNode nodeKind = iota
	scalarNode
	seqNode
	mapNode
)

func (k nodeKind) String() string {
	return [...]string{"nothing", "a value", "a list", "a mapping"}[k]
}

// node is one parsed YAML value with the line it starts on.
type node struct {
	line  int
	kind  nodeKind
	value string  // scalarNode
	items []*node // seqNode
	keys  []string
	vals  []*node // mapNode, in file order
	kline []int   // line of each key
}

// lookup returns the value of key in a mapping node, or nil.
func (n *node) lookup(key string) *node {
	for i, k := range n.keys {
		if k == key {
			return n.vals[i]
		}
	}
	return nil
}

// yamlLine is one significant (non-blank, non-comment) line.
type yamlLine struct {
	num    int    // 1-based line number
	indent int    // column of text
	text   string // without indentation; a trailing comment may remain
}

type yamlParser struct {
	lines []yamlLine
	pos   int
}

// syntaxError is a parse failure at a line.
type syntaxError struct {
	line int
	msg  string
}

func (e *syntaxError) Error() string { return fmt.Sprintf("line %d: %s", e.line, e.msg) }

func errAt(line int, format string, args ...any) error {
	return &syntaxError{line: line, msg: fmt.Sprintf(format, args...)}
}

// parseYAML parses data into a node tree. An empty document is a null node.
func parseYAML(data []byte) (*node, error) {
	lines, err := splitLines(string(data))
	if err != nil {
		return nil, err
	}
	p := &yamlParser{lines: lines}
	if len(lines) == 0 {
		return &node{line: 1, kind: nullNode}, nil
	}
	if lines[0].indent != 0 {
		return nil, errAt(lines[0].num, "the document must start at column 1")
	}
	n, err := p.parseNode(0, 0)
	if err != nil {
		return nil, err
	}
	if p.pos < len(p.lines) {
		l := p.lines[p.pos]
		return nil, errAt(l.num, "unexpected indentation or content")
	}
	return n, nil
}

// splitLines drops blank lines, comment lines and a leading "---", and
// rejects tabs in indentation and control characters.
func splitLines(s string) ([]yamlLine, error) {
	var out []yamlLine
	for i, raw := range strings.Split(s, "\n") {
		num := i + 1
		raw = strings.TrimSuffix(raw, "\r")
		if strings.ContainsFunc(raw, func(r rune) bool { return r < ' ' && r != '\t' || r == 0x7f }) {
			return nil, errAt(num, "control character in line")
		}
		text := strings.TrimLeft(raw, " ")
		indent := len(raw) - len(text)
		if strings.HasPrefix(text, "\t") {
			return nil, errAt(num, "tab in indentation (YAML allows spaces only)")
		}
		text = strings.TrimRight(text, " \t")
		if text == "" || text[0] == '#' {
			continue
		}
		if indent == 0 && (text == "---" || text == "...") {
			if text == "..." || len(out) > 0 {
				return nil, errAt(num, "only one YAML document is allowed")
			}
			continue
		}
		if indent == 0 && strings.HasPrefix(text, "%") {
			return nil, errAt(num, "YAML directives are not supported")
		}
		out = append(out, yamlLine{num: num, indent: indent, text: text})
	}
	return out, nil
}

func (p *yamlParser) peek() (yamlLine, bool) {
	if p.pos >= len(p.lines) {
		return yamlLine{}, false
	}
	return p.lines[p.pos], true
}

// parseNode parses the block starting at the current line, whose
// indentation is at least minIndent.
func (p *yamlParser) parseNode(minIndent, depth int) (*node, error) {
	l, ok := p.peek()
	if !ok || l.indent < minIndent {
		line := 1
		if p.pos > 0 {
			line = p.lines[p.pos-1].num // the line that introduced the empty value
		}
		return &node{line: line, kind: nullNode}, nil
	}
	if depth >= maxDepth {
		return nil, errAt(l.num, "nested deeper than %d levels", maxDepth)
	}
	if isSeqItem(l.text) {
		return p.parseSeq(l.indent, depth)
	}
	if _, _, isKey, err := splitKey(l); err != nil {
		return nil, err
	} else if isKey {
		return p.parseMap(l.indent, depth)
	}
	p.pos++
	return parseScalar(l.num, l.text)
}

func isSeqItem(text string) bool { return text == "-" || strings.HasPrefix(text, "- ") }

// parseSeq parses "- item" lines at exactly indent.
func (p *yamlParser) parseSeq(indent, depth int) (*node, error) {
	seq := &node{line: p.lines[p.pos].num, kind: seqNode}
	for {
		l, ok := p.peek()
		if !ok || l.indent < indent {
			return seq, nil
		}
		if l.indent > indent {
			return nil, errAt(l.num, "unexpected indentation (list items above start at column %d)", indent+1)
		}
		if !isSeqItem(l.text) {
			return seq, nil // a mapping key at the same indentation ends an indentless list
		}
		item, err := p.parseSeqItem(l, depth)
		if err != nil {
			return nil, err
		}
		seq.items = append(seq.items, item)
	}
}

// parseSeqItem parses one "- ..." entry. Content on the dash line is
// re-read as if it were its own line at its column, so "- key: v" opens a
// mapping whose further keys line up under "key".
func (p *yamlParser) parseSeqItem(l yamlLine, depth int) (*node, error) {
	rest := strings.TrimLeft(strings.TrimPrefix(l.text, "-"), " ")
	if rest == "" || rest[0] == '#' {
		p.pos++
		return p.parseNode(l.indent+1, depth+1)
	}
	col := l.indent + (len(l.text) - len(rest))
	sub := yamlLine{num: l.num, indent: col, text: rest}
	_, _, isKey, err := splitKey(sub)
	if err != nil {
		return nil, err
	}
	if isKey || isSeqItem(rest) {
		p.lines[p.pos] = sub
		return p.parseNode(col, depth+1)
	}
	p.pos++
	return parseScalar(l.num, rest)
}

// parseMap parses "key: value" lines at exactly indent.
func (p *yamlParser) parseMap(indent, depth int) (*node, error) {
	m := &node{line: p.lines[p.pos].num, kind: mapNode}
	for {
		l, ok := p.peek()
		if !ok || l.indent < indent {
			return m, nil
		}
		if l.indent > indent {
			return nil, errAt(l.num, "unexpected indentation (keys above start at column %d)", indent+1)
		}
		if isSeqItem(l.text) {
			return nil, errAt(l.num, "a list item where a key was expected")
		}
		key, value, isKey, err := splitKey(l)
		if err != nil {
			return nil, err
		}
		if !isKey {
			return nil, errAt(l.num, "expected \"key: value\"")
		}
		if m.lookup(key) != nil {
			return nil, errAt(l.num, "duplicate key %q", key)
		}
		p.pos++
		v, err := p.mapValue(l, indent, value, depth)
		if err != nil {
			return nil, err
		}
		m.keys, m.vals, m.kline = append(m.keys, key), append(m.vals, v), append(m.kline, l.num)
	}
}

// mapValue parses the value of a key: inline, or the block below it (a
// list may sit at the key's own indentation).
func (p *yamlParser) mapValue(l yamlLine, indent int, value string, depth int) (*node, error) {
	if value != "" {
		return parseScalar(l.num, value)
	}
	next, ok := p.peek()
	switch {
	case !ok:
		return &node{line: l.num, kind: nullNode}, nil
	case next.indent > indent:
		return p.parseNode(indent+1, depth+1)
	case next.indent == indent && isSeqItem(next.text):
		return p.parseSeq(indent, depth+1)
	}
	return &node{line: l.num, kind: nullNode}, nil
}

// splitKey recognises "key: value" and "key:" (plain keys only). It
// reports isKey=false for text that is a plain scalar.
func splitKey(l yamlLine) (key, value string, isKey bool, err error) {
	t := l.text
	if t[0] == '"' || t[0] == '\'' {
		q := t[0]
		end := strings.IndexByte(t[1:], q)
		if end >= 0 && strings.HasPrefix(strings.TrimLeft(t[end+2:], " "), ":") {
			return "", "", false, errAt(l.num, "quoted keys are not supported")
		}
		return "", "", false, nil
	}
	if t[0] == '[' || t[0] == '{' {
		return "", "", false, nil
	}
	i := 0
	for {
		j := strings.IndexByte(t[i:], ':')
		if j < 0 {
			return "", "", false, nil
		}
		i += j
		if i+1 == len(t) || t[i+1] == ' ' {
			break
		}
		i++
	}
	key = strings.TrimRight(t[:i], " ")
	if strings.Contains(key, " #") {
		return "", "", false, nil // the colon is inside a comment
	}
	if key == "" {
		return "", "", false, errAt(l.num, "empty key")
	}
	value = strings.TrimLeft(t[i+1:], " ")
	if value != "" && value[0] == '#' {
		value = ""
	}
	return key, value, true, nil
}

// parseScalar parses an inline value: a quoted or plain scalar, or a flow
// sequence of scalars.
func parseScalar(line int, s string) (*node, error) {
	switch s[0] {
	case '[':
		return parseFlowSeq(line, s)
	case '{':
		return nil, errAt(line, "flow mappings ({...}) are not supported")
	case '&', '*', '!', '|', '>', '%', '@', '`':
		return nil, errAt(line, "YAML anchors, aliases, tags and block scalars are not supported (quote the value, e.g. '*')")
	}
	v, rest, err := scanScalar(line, s, false)
	if err != nil {
		return nil, err
	}
	if rest = strings.TrimLeft(rest, " "); rest != "" && rest[0] != '#' {
		return nil, errAt(line, "unexpected text after the value")
	}
	return v, nil
}

// scanScalar reads one scalar from s and returns what follows it. In a flow
// sequence a plain scalar ends at ',' or ']'.
func scanScalar(line int, s string, inFlow bool) (*node, string, error) {
	switch s[0] {
	case '\'':
		return scanSingle(line, s)
	case '"':
		return scanDouble(line, s)
	}
	end := len(s)
	if i := strings.Index(s, " #"); i >= 0 {
		end = i
	}
	if inFlow {
		if i := strings.IndexAny(s[:end], ",]"); i >= 0 {
			end = i
		}
	}
	v := strings.TrimRight(s[:end], " ")
	if strings.Contains(v, ": ") || strings.HasSuffix(v, ":") {
		return nil, "", errAt(line, "quote a value that contains \": \" or ends with ':'")
	}
	n := &node{line: line, kind: scalarNode, value: v}
	switch v {
	case "", "~", "null", "Null", "NULL":
		n.kind, n.value = nullNode, ""
	}
	return n, s[end:], nil
}

func scanSingle(line int, s string) (*node, string, error) {
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		if s[i] != '\'' {
			b.WriteByte(s[i])
			continue
		}
		if i+1 < len(s) && s[i+1] == '\'' {
			b.WriteByte('\'')
			i++
			continue
		}
		return &node{line: line, kind: scalarNode, value: b.String()}, s[i+1:], nil
	}
	return nil, "", errAt(line, "unterminated single-quoted value")
}

func scanDouble(line int, s string) (*node, string, error) {
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"':
			return &node{line: line, kind: scalarNode, value: b.String()}, s[i+1:], nil
		case c != '\\':
			b.WriteByte(c)
			continue
		case i+1 == len(s):
			return nil, "", errAt(line, "unterminated double-quoted value")
		}
		i++
		switch s[i] {
		case '\\', '"', '/':
			b.WriteByte(s[i])
		case 'n':
			b.WriteByte('\n')
		case 't':
			b.WriteByte('\t')
		default:
			return nil, "", errAt(line, "unsupported escape \\%c in double-quoted value", s[i])
		}
	}
	return nil, "", errAt(line, "unterminated double-quoted value")
}

// parseFlowSeq parses "[a, 'b', "c"]" (scalars only).
func parseFlowSeq(line int, s string) (*node, error) {
	seq := &node{line: line, kind: seqNode}
	rest := strings.TrimLeft(s[1:], " ")
	if strings.HasPrefix(rest, "]") {
		return seq, trailing(line, rest[1:])
	}
	for {
		if rest == "" {
			return nil, errAt(line, "unterminated flow list (missing ']'; lists may not span lines)")
		}
		if strings.ContainsRune("[{&*!|>", rune(rest[0])) {
			return nil, errAt(line, "only plain or quoted values are supported inside [...]")
		}
		item, after, err := scanScalar(line, rest, true)
		if err != nil {
			return nil, err
		}
		if item.kind == nullNode {
			return nil, errAt(line, "empty item in flow list")
		}
		seq.items = append(seq.items, item)
		rest = strings.TrimLeft(after, " ")
		switch {
		case strings.HasPrefix(rest, ","):
			rest = strings.TrimLeft(rest[1:], " ")
		case strings.HasPrefix(rest, "]"):
			return seq, trailing(line, rest[1:])
		default:
			return nil, errAt(line, "unterminated flow list (missing ']'; lists may not span lines)")
		}
	}
}

func trailing(line int, rest string) error {
	if rest = strings.TrimLeft(rest, " "); rest != "" && rest[0] != '#' {
		return errAt(line, "unexpected text after the list")
	}
	return nil
}
