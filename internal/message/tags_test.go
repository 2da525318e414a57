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
