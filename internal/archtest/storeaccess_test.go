package archtest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// The RocketMQ adapter reaches the message store through the core, except
// on its two fast paths (ARCHITECTURE.md, "Core, store and front doors"):
// the pull, which lends the store's read buffers to the connection without
// a copy, and the send's put, which defers its answer to the group commit
// (store.PutMessagesDeferred; a read burst's sends, store.PutEachDeferred).
// Every other handler (queries, offsets, admin) calls core methods.

// storeFastPaths are the files of internal/broker that may use the store
// directly.
var storeFastPaths = map[string]bool{"pull.go": true, "send.go": true, "sendburst.go": true}

// storeUses returns "line: expression" for each use of the store in f: a
// method or field of the Broker's store field (x.st.M) or of what a
// Store() call returns (x.Store().M).
func storeUses(fset *token.FileSet, f *ast.File) []string {
	var out []string
	ast.Inspect(f, func(n ast.Node) bool {
		sel, ok := n.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		switch x := sel.X.(type) {
		case *ast.SelectorExpr:
			if x.Sel.Name == "st" {
				out = append(out, fset.Position(sel.Pos()).String()+": .st."+sel.Sel.Name)
			}
		case *ast.CallExpr:
			if fn, ok := x.Fun.(*ast.SelectorExpr); ok && fn.Sel.Name == "Store" {
				out = append(out, fset.Position(sel.Pos()).String()+": .Store()."+sel.Sel.Name)
			}
		}
		return true
	})
	return out
}

func TestBrokerReachesStoreOnlyOnFastPaths(t *testing.T) {
	m := load(t)
	dir := filepath.Join(m.root, "internal", "broker")
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	seen := map[string]bool{}
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		uses := storeUses(fset, f)
		if len(uses) > 0 {
			seen[name] = true
		}
		if !storeFastPaths[name] {
			for _, u := range uses {
				t.Errorf("%s: the RocketMQ adapter uses the store outside its fast paths; call a core method (internal/core/query.go) instead", u)
			}
		}
	}
	var missing []string
	for name := range storeFastPaths {
		if !seen[name] {
			missing = append(missing, name)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("%v no longer use the store: take them out of storeFastPaths (and ARCHITECTURE.md)", missing)
	}
}
