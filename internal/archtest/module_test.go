package archtest

import (
	"bufio"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// pkg is one directory of Go files in the module.
type pkg struct {
	path        string          // import path
	dir         string          // directory relative to the module root
	name        string          // package name of the non-test files
	imports     map[string]bool // imports of non-test files
	testImports map[string]bool // imports of _test.go files
	files       []string        // every .go file, relative to the module root
	hasCode     bool            // has non-test files
	doc         string          // package comment of the non-test files
}

type module struct {
	root string
	path string
	pkgs map[string]*pkg // by import path
}

var (
	loadOnce sync.Once
	loaded   *module
	loadErr  error
)

// load parses the imports and package comments of every package in the
// module once per test binary.
func load(t *testing.T) *module {
	t.Helper()
	loadOnce.Do(func() { loaded, loadErr = loadModule() })
	if loadErr != nil {
		t.Fatal(loadErr)
	}
	return loaded
}

func loadModule() (*module, error) {
	root, err := filepath.Abs("../..")
	if err != nil {
		return nil, err
	}
	modPath, err := modulePath(filepath.Join(root, "go.mod"))
	if err != nil {
		return nil, err
	}
	m := &module{root: root, path: modPath, pkgs: make(map[string]*pkg)}
	fset := token.NewFileSet()
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != root && skipDir(d.Name()) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") {
			return nil
		}
		return m.addFile(fset, p)
	})
	return m, err
}

func skipDir(name string) bool {
	return name == "testdata" || name == "vendor" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")
}

func modulePath(gomod string) (string, error) {
	f, err := os.Open(gomod)
	if err != nil {
		return "", err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(s.Text()), "module "); ok {
			return strings.Trim(strings.TrimSpace(rest), `"`), nil
		}
	}
	return "", os.ErrNotExist
}

func (m *module) addFile(fset *token.FileSet, p string) error {
	f, err := parser.ParseFile(fset, p, nil, parser.ImportsOnly|parser.ParseComments)
	if err != nil {
		return err
	}
	rel, _ := filepath.Rel(m.root, p)
	dir := filepath.ToSlash(filepath.Dir(rel))
	ip := m.path
	if dir != "." {
		ip = m.path + "/" + dir
	}
	k := m.pkgs[ip]
	if k == nil {
		k = &pkg{path: ip, dir: dir, imports: map[string]bool{}, testImports: map[string]bool{}}
		m.pkgs[ip] = k
	}
	k.files = append(k.files, rel)
	isTest := strings.HasSuffix(p, "_test.go")
	dst := k.imports
	if isTest {
		dst = k.testImports
	} else {
		k.hasCode = true
		k.name = f.Name.Name
		if f.Doc != nil && k.doc == "" {
			k.doc = f.Doc.Text()
		}
	}
	for _, is := range f.Imports {
		v, err := strconv.Unquote(is.Path.Value)
		if err != nil {
			return err
		}
		dst[v] = true
	}
	return nil
}

// sorted returns the packages in import path order.
func (m *module) sorted() []*pkg {
	out := make([]*pkg, 0, len(m.pkgs))
	for _, p := range m.pkgs {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].path < out[j].path })
	return out
}

// rel returns an import path relative to the module ("internal/store"), or
// the path itself for packages outside the module.
func (m *module) rel(ip string) string {
	if ip == m.path {
		return "."
	}
	if r, ok := strings.CutPrefix(ip, m.path+"/"); ok {
		return r
	}
	return ip
}

// isStd reports whether ip is a standard library package: its first
// element has no dot.
func isStd(ip string) bool {
	first, _, _ := strings.Cut(ip, "/")
	return !strings.Contains(first, ".") && ip != "C"
}

// under reports whether ip (module-relative) is dir or inside it.
func under(ip, dir string) bool {
	return ip == dir || strings.HasPrefix(ip, dir+"/")
}

// deps returns the module-internal packages p depends on through non-test
// imports, transitively, each with the chain that leads to it.
func (m *module) deps(p *pkg) map[string][]string {
	chains := map[string][]string{}
	var visit func(ip string, chain []string)
	visit = func(ip string, chain []string) {
		q := m.pkgs[ip]
		if q == nil {
			return
		}
		for imp := range q.imports {
			r := m.rel(imp)
			if _, seen := chains[r]; seen || r == imp {
				continue
			}
			c := append(append([]string(nil), chain...), r)
			chains[r] = c
			visit(imp, c)
		}
	}
	visit(p.path, []string{m.rel(p.path)})
	return chains
}
