package bench

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestParseFlatYAML(t *testing.T) {
	src := "---\n# comment\n\nname: sync-unbatched   # trailing\nsize: 1KiB\r\n" +
		"url: http://x#y\n" +
		`dq: "a: b # c \"q\" \\ \t"` + "\n" +
		"sq: 'it''s # here'  # comment\n" +
		"empty:\n" +
		"dash-key_2: v\n"
	got, err := ParseFlatYAML(src)
	if err != nil {
		t.Fatal(err)
	}
	want := []KeyValue{
		{"name", "sync-unbatched", 4}, {"size", "1KiB", 5}, {"url", "http://x#y", 6},
		{"dq", "a: b # c \"q\" \\ \t", 7}, {"sq", "it's # here", 8}, {"empty", "", 9}, {"dash-key_2", "v", 10},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got  %+v\nwant %+v", got, want)
	}
}

func TestParseFlatYAMLRejects(t *testing.T) {
	cases := map[string]string{
		"nested":           "a:\n  b: 1\n",
		"list":             "- a\n",
		"no colon":         "just text\n",
		"no space":         "a:b\n",
		"bad key":          "a b: 1\n",
		"repeat":           "a: 1\nb: 2\na: 3\n",
		"flow":             "a: [1, 2]\n",
		"map":              "a: {b: 1}\n",
		"anchor":           "a: &x 1\n",
		"block":            "a: |\n",
		"unterminated":     "a: \"x\n",
		"unterminated '":   "a: 'x\n",
		"after quote":      "a: \"x\" y\n",
		"bad escape":       "a: \"\\q\"\n",
		"second document":  "a: 1\n---\nb: 2\n",
		"tab indented":     "\ta: 1\n",
		"comment no space": "a: \"x\"# c\n",
		"empty key":        ": 1\n",
		"unicode key":      "ä: 1\n",
	}
	for name, src := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := ParseFlatYAML(src)
			if !errors.Is(err, ErrYAML) {
				t.Fatalf("err = %v, want ErrYAML", err)
			}
			if !strings.Contains(err.Error(), "line ") {
				t.Fatalf("error %q has no line number", err)
			}
		})
	}
}
