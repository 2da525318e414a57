package message_test

import (
	"testing"

	"github.com/keelmq/keel/internal/message"
)

// TestTagsCode checks Java String.hashCode values worked out by hand
// (h = 31*h + UTF-16 code unit, int32 wrap-around).
func TestTagsCode(t *testing.T) {
	cases := []struct {
		tag  string
		want int64
	}{
		{"", 0},
		{"a", 97},
		{"ab", 97*31 + 98},
		{"TagA", ((84*31+97)*31+103)*31 + 65}, // 2598919
		{"Aa", 2112},                          // 65*31+97
		{"BB", 2112},                          // 66*31+66
		{"é", 0xE9},                           // one code unit, not the two UTF-8 bytes
		{"中", 0x4E2D},
		{"中a", 0x4E2D*31 + 97},
		{"😀", 0xD83D*31 + 0xDE00}, // U+1F600 = surrogate pair D83D DE00
		{"a😀", (97*31+0xD83D)*31 + 0xDE00},
		{"hello", 99162322},
		{"polygenelubricants", -2147483648}, // wraps to Integer.MIN_VALUE
		{"\xff", 0xFFFD},                    // invalid UTF-8: U+FFFD
	}
	for _, c := range cases {
		if got := message.TagsCode(c.tag); got != c.want {
			t.Errorf("TagsCode(%q) = %d, want %d", c.tag, got, c.want)
		}
		if got := message.TagsCodeBytes([]byte(c.tag)); got != c.want {
			t.Errorf("TagsCodeBytes(%q) = %d, want %d", c.tag, got, c.want)
		}
	}
}

func TestViewTagsCode(t *testing.T) {
	m := &message.Message{Topic: "T", Properties: message.SetProperty("", message.PropTags, "TagA")}
	rec, _ := m.AppendStored(nil)
	if got := message.View(rec).TagsCode(); got != 2598919 {
		t.Fatalf("View.TagsCode = %d", got)
	}
	m.Properties = ""
	rec, _ = m.AppendStored(nil)
	if got := message.View(rec).TagsCode(); got != 0 {
		t.Fatalf("View.TagsCode without TAGS = %d", got)
	}
}

// IndexProps finds what Tags, Keys and UniqKey find, present and empty or
// absent alike, with one pass.
func TestViewIndexProps(t *testing.T) {
	cases := []string{
		"",
		"TAGS\x01TagA\x02KEYS\x01k1 k2\x02UNIQ_KEY\x01ID1\x02",
		"UNIQ_KEY\x01a\x02TAGS\x01\x02KEYS\x01x\x02UNIQ_KEY\x01b", // last wins, empty TAGS, no trailing \x02
		"TAGS\x01a\x01b\x02KEYS\x02\x02UNIQ_KEY\x01u\x01\x02",     // items with two separators or none do not count
		"WAIT\x01true\x02TAGSX\x01no\x02TAG\x01no\x02",
	}
	for _, props := range cases {
		checkIndexProps(t, props)
	}
}

func FuzzViewIndexProps(f *testing.F) {
	f.Add("TAGS\x01TagA\x02KEYS\x01k1 k2\x02UNIQ_KEY\x01ID1\x02")
	f.Add("TAGS\x01a\x01b\x02TAGS\x01c")
	f.Fuzz(func(t *testing.T, props string) {
		if len(props) > 1<<15-1 {
			return
		}
		checkIndexProps(t, props)
	})
}

func checkIndexProps(t *testing.T, props string) {
	t.Helper()
	m := &message.Message{Topic: "T", Properties: props}
	rec, err := m.AppendStored(nil)
	if err != nil {
		t.Fatalf("AppendStored(%q): %v", props, err)
	}
	v := message.View(rec)
	tags, keys, uniq := v.IndexProps()
	for _, c := range []struct {
		name      string
		got, want []byte
	}{{"TAGS", tags, v.Tags()}, {"KEYS", keys, v.Keys()}, {"UNIQ_KEY", uniq, v.UniqKey()}} {
		if string(c.got) != string(c.want) || (c.got == nil) != (c.want == nil) {
			t.Errorf("IndexProps of %q: %s = %q (nil %v), want %q (nil %v)", props, c.name, c.got, c.got == nil, c.want, c.want == nil)
		}
	}
}
