package config

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestParseProperties(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []Property
	}{
		{"equals", "a=b", []Property{{"a", "b", 1}}},
		{"colon", "a:b", []Property{{"a", "b", 1}}},
		{"space separator", "a b", []Property{{"a", "b", 1}}},
		{"spaces around separator", "  a  =  b  ", []Property{{"a", "b", 1}}},
		{"tab and formfeed", "\ta\f=\tb\t", []Property{{"a", "b", 1}}},
		{"second separator is value", "a==b", []Property{{"a", "=b", 1}}},
		{"space then equals", "a = =b", []Property{{"a", "=b", 1}}},
		{"colon in value", "namesrvAddr=127.0.0.1:9876;h:1", []Property{{"namesrvAddr", "127.0.0.1:9876;h:1", 1}}},
		{"empty value", "a=", []Property{{"a", "", 1}}},
		{"key only", "a", []Property{{"a", "", 1}}},
		{"hash comment", "# c\na=b", []Property{{"a", "b", 2}}},
		{"bang comment", "  ! c\na=b", []Property{{"a", "b", 2}}},
		{"hash inside value", "a=b#c", []Property{{"a", "b#c", 1}}},
		{"comment does not continue", "# c \\\na=b", []Property{{"a", "b", 2}}},
		{"blank lines", "\n\n  \n\ta=b\n\n", []Property{{"a", "b", 4}}},
		{"crlf", "a=b\r\nc=d\r\n", []Property{{"a", "b", 1}, {"c", "d", 2}}},
		{"cr only", "a=b\rc=d", []Property{{"a", "b", 1}, {"c", "d", 2}}},
		{"continuation", "a=b\\\n   c\nd=e", []Property{{"a", "bc", 1}, {"d", "e", 3}}},
		{"continuation crlf", "a=b\\\r\n  c", []Property{{"a", "bc", 1}}},
		{"continuation in key", "ke\\\n  y=v", []Property{{"key", "v", 1}}},
		{"continuation line starting with hash", "a=b\\\n#c", []Property{{"a", "b#c", 1}}},
		{"continuation at eof", "a=b\\", []Property{{"a", "b", 1}}},
		{"even backslashes do not continue", "a=b\\\\\nc=d", []Property{{"a", "b\\", 1}, {"c", "d", 2}}},
		{"escapes", `a=x\ty\nz\rw\fv`, []Property{{"a", "x\ty\nz\rw\fv", 1}}},
		{"escaped separator in key", `a\=b\:c\ d=e`, []Property{{"a=b:c d", "e", 1}}},
		{"other escapes are literal", `a=\q\\\#`, []Property{{"a", `q\#`, 1}}},
		{"unicode escape", `a=\u00e9\u4E2D`, []Property{{"a", "é中", 1}}},
		{"surrogate pair", `a=\uD83D\uDE00`, []Property{{"a", "😀", 1}}},
		{"raw utf-8", "a=é", []Property{{"a", "é", 1}}},
		{"escaped trailing space kept", `a=b\ `, []Property{{"a", "b ", 1}}},
		{"escaped leading space kept", `a=\ b`, []Property{{"a", " b", 1}}},
		{"trailing space trimmed", "flushDiskType=SYNC_FLUSH   \t", []Property{{"flushDiskType", "SYNC_FLUSH", 1}}},
		{"bom", "\xEF\xBB\xBFa=b", []Property{{"a", "b", 1}}},
		{"duplicates kept in order", "a=1\na=2", []Property{{"a", "1", 1}, {"a", "2", 2}}},
		{"empty input", "", nil},
		{"only comments", "#x\n!y\n", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseProperties([]byte(tt.in))
			if err != nil {
				t.Fatalf("ParseProperties(%q): %v", tt.in, err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("ParseProperties(%q)\n got %+v\nwant %+v", tt.in, got, tt.want)
			}
		})
	}
}

func TestParsePropertiesErrors(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"empty key", "=v", "line 1: empty key"},
		{"empty key after comment", "#c\n  :v", "line 2: empty key"},
		{"short unicode escape", "a=\\u12", "line 1: key \"a\": malformed \\uXXXX escape"},
		{"bad hex", "a=\\u12G4", "malformed"},
		{"bad escape in key", "\\u00zz=1", "line 1: key: malformed"},
		{"lone high surrogate", "a=\\uD83D", "lone UTF-16 surrogate"},
		{"lone low surrogate", "a=\\uDE00x", "lone UTF-16 surrogate"},
		{"invalid utf-8", "a=b\nc=\xff", "line 2: not valid UTF-8"},
		{"too large", "a=" + strings.Repeat("x", MaxFileBytes), "larger than"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseProperties([]byte(tt.in))
			if err == nil {
				t.Fatalf("ParseProperties(%.40q) succeeded, want error containing %q", tt.in, tt.want)
			}
			if !errors.Is(err, ErrSyntax) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %q: want ErrSyntax containing %q", err, tt.want)
			}
		})
	}
}
