package archtest

import (
	"bytes"
	"go/format"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPackageComments requires a package comment on every package with
// non-test code: "Package name ..." (or "Command name ..." for main).
func TestPackageComments(t *testing.T) {
	m := load(t)
	for _, p := range m.sorted() {
		if !p.hasCode {
			continue
		}
		want := "Package " + p.name + " "
		if p.name == "main" {
			want = "Command "
		}
		switch {
		case p.doc == "":
			t.Errorf("%s has no package comment (put one in doc.go: purpose, key types, concurrency contract)", m.rel(p.path))
		case !strings.HasPrefix(p.doc, want):
			t.Errorf("%s: package comment should start %q, starts %q", m.rel(p.path), want, firstLine(p.doc))
		}
	}
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// TestGofmt requires every .go file to be formatted as gofmt would.
func TestGofmt(t *testing.T) {
	m := load(t)
	for _, p := range m.sorted() {
		for _, f := range p.files {
			src, err := os.ReadFile(filepath.Join(m.root, f))
			if err != nil {
				t.Fatal(err)
			}
			out, err := format.Source(src)
			if err != nil {
				t.Errorf("%s: %v", f, err)
				continue
			}
			if !bytes.Equal(src, out) {
				t.Errorf("%s is not gofmt'ed (run gofmt -w %s)", f, f)
			}
		}
	}
}
