package config

import (
	"os"
	"strings"
	"testing"
)

// TestDocsListEveryKey keeps docs/configuration.md true: every key has a
// table row whose default column is the value Default() prints.
func TestDocsListEveryKey(t *testing.T) {
	data, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := make(map[string]string) // key -> default column
	for _, line := range strings.Split(string(data), "\n") {
		cols := strings.Split(line, "|")
		if len(cols) < 4 || !strings.HasPrefix(strings.TrimSpace(cols[1]), "`") {
			continue
		}
		key := strings.Trim(strings.Fields(cols[1])[0], "`")
		rows[key] = strings.TrimSpace(cols[2])
	}
	d := Default()
	for _, f := range fields {
		def, ok := rows[f.key]
		if !ok {
			t.Errorf("docs/configuration.md has no row for %s", f.key)
			continue
		}
		want := "`" + f.get(d) + "`"
		if f.get(d) == "" {
			want = "(empty)"
		}
		if def != want {
			t.Errorf("docs/configuration.md: %s default %s, want %s", f.key, def, want)
		}
	}
	dc := DefaultController()
	for _, key := range ControllerKeys() {
		def, ok := rows[key]
		if !ok {
			t.Errorf("docs/configuration.md has no row for controller key %s", key)
			continue
		}
		v, _ := dc.Get(key)
		want := "`" + v + "`"
		if v == "" {
			want = "(empty)"
		}
		if def != want {
			t.Errorf("docs/configuration.md: %s default %s, want %s", key, def, want)
		}
	}
}
