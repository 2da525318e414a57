package config

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// ErrUnknownKey is returned by Set for a key Keel does not support.
var ErrUnknownKey = errors.New("config: unknown key")

// ValueError reports a value that does not parse or is out of range. Origin
// says where the value came from ("broker.conf:12", "--data-dir"), if known.
type ValueError struct {
	Key    string
	Value  string
	Origin string
	Err    error
}

func (e *ValueError) Error() string {
	at := ""
	if e.Origin != "" {
		at = " (" + e.Origin + ")"
	}
	return fmt.Sprintf("config: %s=%q%s: %v", e.Key, e.Value, at, e.Err)
}

func (e *ValueError) Unwrap() error { return e.Err }

// Unknown is a key in a file that Keel does not support. Hint, if not empty,
// says what Keel does instead or which key was probably meant.
type Unknown struct {
	Key   string
	Value string
	Line  int
	Hint  string
}

func (u Unknown) String() string {
	s := fmt.Sprintf("line %d: unknown key %q", u.Line, u.Key)
	if u.Hint != "" {
		s += ": " + u.Hint
	}
	return s
}

// Set sets key (a broker.conf key name) from its textual value, in the
// file's units. Flags use it to override the file.
func (b *Broker) Set(key, value string) error {
	return b.SetFrom(key, value, "")
}

// SetFrom is Set that records origin for later error messages.
func (b *Broker) SetFrom(key, value, origin string) error {
	f := byKey[key]
	if f == nil {
		return fmt.Errorf("%w %q", ErrUnknownKey, key)
	}
	value = strings.TrimSpace(value)
	if err := f.set(b, value); err != nil {
		return &ValueError{Key: key, Value: value, Origin: origin, Err: err}
	}
	if b.origin == nil {
		b.origin = make(map[string]string)
	}
	b.origin[f.key] = origin
	return nil
}

// Load reads the broker.conf at path over Default. It returns the keys it
// does not support (the caller decides whether they are fatal), or an error
// naming the line of the first bad value. It does not call Validate: flags
// are applied first.
func Load(path string) (*Broker, []Unknown, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, fmt.Errorf("config: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return nil, nil, fmt.Errorf("config: read %s: %w", path, err)
	}
	b, unknown, err := Parse(data, path)
	if err != nil {
		return nil, nil, err
	}
	return b, unknown, nil
}

// Parse is Load for the contents of a file; name is used in messages.
func Parse(data []byte, name string) (*Broker, []Unknown, error) {
	props, err := ParseProperties(data)
	if err != nil {
		return nil, nil, fmt.Errorf("config: %s: %w", name, err)
	}
	b := Default()
	var unknown []Unknown
	seen := make(map[string]int) // canonical key -> line
	for _, p := range props {
		f := byKey[p.Key]
		if f == nil {
			if err := checkUnsupported(p, name); err != nil {
				return nil, nil, err
			}
			unknown = append(unknown, Unknown{Key: p.Key, Value: p.Value, Line: p.Line, Hint: hint(p.Key)})
			continue
		}
		if prev, dup := seen[f.key]; dup {
			return nil, nil, fmt.Errorf("config: %s:%d: %s is already set on line %d", name, p.Line, p.Key, prev)
		}
		seen[f.key] = p.Line
		if err := b.SetFrom(p.Key, p.Value, fmt.Sprintf("%s:%d", name, p.Line)); err != nil {
			return nil, nil, err
		}
	}
	return b, unknown, nil
}
