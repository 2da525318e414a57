package kafka

//go:generate go run ./gen -out kmsgfields_gen.go

// fieldVersions says in which versions a kmsg struct field is on the
// wire: min..max (max -1: no upper bound), or, tag >= 0, as that tagged
// field of flexible versions.
type fieldVersions struct {
	min, max int16
	tag      int32
}

// in reports whether the field is on the wire (outside the tag section)
// at version v.
func (f fieldVersions) in(v int16) bool {
	return f.tag < 0 && v >= f.min && (f.max < 0 || v <= f.max)
}
