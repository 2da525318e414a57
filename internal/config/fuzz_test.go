package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzParseProperties checks that no input panics the parser and that every
// parse result survives a write/parse round trip. It also runs the result
// through Parse and Validate.
func FuzzParseProperties(f *testing.F) {
	files, _ := filepath.Glob("testdata/*.conf")
	for _, name := range files {
		data, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		props, err := ParseProperties(data)
		if err != nil {
			return
		}
		var enc strings.Builder
		for _, p := range props {
			if p.Key == "" || !utf8.ValidString(p.Key) || !utf8.ValidString(p.Value) {
				t.Fatalf("bad property %+v", p)
			}
			if p.Line < 1 || p.Line > strings.Count(string(data), "\n")+strings.Count(string(data), "\r")+1 {
				t.Fatalf("line %d out of range", p.Line)
			}
			enc.WriteString(escapeProperty(p.Key, true) + "=" + escapeProperty(p.Value, false) + "\n")
		}
		again, err := ParseProperties([]byte(enc.String()))
		if err != nil {
			t.Fatalf("reparse of %q: %v", enc.String(), err)
		}
		if len(again) != len(props) {
			t.Fatalf("reparse: %d properties, want %d", len(again), len(props))
		}
		for i := range props {
			if again[i].Key != props[i].Key || again[i].Value != props[i].Value {
				t.Fatalf("reparse %d: %q=%q, want %q=%q", i, again[i].Key, again[i].Value, props[i].Key, props[i].Value)
			}
		}
		if b, _, err := Parse(data, "fuzz"); err == nil {
			_ = b.Validate()
		}
	})
}

// escapeProperty writes s so that ParseProperties reads it back unchanged.
func escapeProperty(s string, key bool) string {
	var b strings.Builder
	for i, r := range s {
		switch r {
		case '\\':
			b.WriteString(`\\`)
		case '\t':
			b.WriteString(`\t`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\f':
			b.WriteString(`\f`)
		case '\ufeff': // at the start of the file the parser skips it as a BOM
			b.WriteString(`\uFEFF`)
		case ' ':
			b.WriteString(`\ `)
		case '=', ':':
			if key {
				b.WriteByte('\\')
			}
			b.WriteRune(r)
		case '#', '!':
			if key && i == 0 {
				b.WriteByte('\\')
			}
			b.WriteRune(r)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}
