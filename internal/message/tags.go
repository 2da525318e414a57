package message

import "unicode/utf8"

// TagsCode is the ConsumeQueue tag hash of a tag: Java's String.hashCode over
// UTF-16 code units, sign-extended to int64; 0 for an empty tag.
//
// Java decodes the tag from UTF-8 before hashing; an invalid UTF-8 byte is
// hashed here as U+FFFD, one per byte. Java may fold a truncated multi-byte
// sequence into a single U+FFFD, so tags that are not valid UTF-8 can hash
// differently from a Java broker (they cannot be typed in a Java client).
func TagsCode(tag string) int64 {
	var h int32
	for _, r := range tag {
		h = hashRune(h, r)
	}
	return int64(h)
}

// TagsCodeBytes is TagsCode for a tag held in a byte slice (such as
// View.Tags()); it does not allocate.
func TagsCodeBytes(tag []byte) int64 {
	var h int32
	for len(tag) > 0 {
		r, n := utf8.DecodeRune(tag)
		tag = tag[n:]
		h = hashRune(h, r)
	}
	return int64(h)
}

// hashRune folds r into a String.hashCode state: one UTF-16 code unit, or a
// surrogate pair for a supplementary character.
func hashRune(h int32, r rune) int32 {
	if r < 0x10000 {
		return 31*h + r
	}
	r -= 0x10000
	h = 31*h + (0xD800 + r>>10)
	return 31*h + (0xDC00 + r&0x3FF)
}

// TagsCode returns the TagsCode of the record's TAGS property (0 without one).
func (v View) TagsCode() int64 { return TagsCodeBytes(v.Tags()) }
