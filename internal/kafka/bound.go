package kafka

// The decoding bound: kmsg's ReadFrom allocates every array element it is
// told of as a whole Go struct, tens of bytes for an element of three on
// the wire, so a request's heap follows its declared counts rather than
// its size (a 16 MiB Produce of 5.6 million empty topics decodes to
// gigabytes). Before kmsg sees a body, prepassCost walks its bytes with
// kmsg's own layout — the Go structs of the request (reflect) and the
// versions and tags of their fields (kmsgfields_gen.go, generated from
// kmsg's source) — allocating nothing, and adds up what ReadFrom will
// allocate: each array's elements at their Go size, each copied string,
// each nullable string's pointer, each tag section's map. A body whose
// cost exceeds maxDecodeFactor times its wire bytes plus maxDecodeSlackBytes
// is refused before it is decoded. The walk stops as soon as the cost
// passes the limit, so refusing costs no more than reading.
//
// The estimate is an upper bound of what ReadFrom allocates
// (TestPrepassMatchesKmsg checks it against measured allocations and
// against kmsg's encoding of random requests of every served API and
// version: the walk must consume exactly the bytes kmsg wrote), and it
// must accept whatever kmsg accepts within the bound.

import (
	"encoding/binary"
	"fmt"
	"reflect"
	"sync"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// Limits of the decoding bound (docs/security.md).
const (
	// maxDecodeFactor bounds a body's decoded allocations per wire byte.
	maxDecodeFactor = 8
	// maxDecodeSlackBytes is allowed on top of the factor, so that a small
	// request with many tiny elements (a Metadata of short topic names)
	// always passes.
	maxDecodeSlackBytes = 256 << 10
	// maxRequestElements bounds the array elements of one request, nested
	// ones included: a handler's work and its response grow with them
	// (a Produce answers every partition it names), not with the bytes.
	maxRequestElements = 100_000
	// handlerBytesPerElement is what the budget is charged per element
	// for the handler's work and response, beyond the decoded request (a
	// Produce naming partitions that do not exist takes about 650 bytes
	// per partition to answer, a CreateTopics about 400 per topic).
	handlerBytesPerElement = 1024
)

// decodeLimit returns the most a body of n wire bytes may allocate.
func decodeLimit(n int) int64 { return maxDecodeFactor*int64(n) + maxDecodeSlackBytes }

// nodeKind is the wire shape of one schema node.
type nodeKind uint8

const (
	kFixed      nodeKind = iota // width bytes
	kString                     // copied into a Go string
	kNullString                 // *string: a pointer and a copy
	kBytes                      // a slice of the frame, no copy
	kArray                      // elem, count elements of Go size elemSize
	kStruct                     // fields, then (flexible) a tag section
)

// node is a request type at one version, compiled for the walk.
type node struct {
	kind     nodeKind
	width    int   // kFixed
	elem     *node // kArray
	elemSize int64 // kArray: Go size of one element
	fields   []*node
	tags     map[uint64]*node // kStruct: known tagged fields by tag
	name     string           // for errors
}

type schemaKey struct {
	t reflect.Type
	v int16
}

var schemas sync.Map // schemaKey → *node

// schemaFor returns the compiled schema of a request of r's type at its
// version.
func schemaFor(r kmsg.Request) *node {
	t := reflect.TypeOf(r).Elem()
	k := schemaKey{t, r.GetVersion()}
	if n, ok := schemas.Load(k); ok {
		return n.(*node)
	}
	n := compile(t, r.GetVersion(), true, 0)
	schemas.Store(k, n)
	return n
}

// compile builds the node of Go type t at version v. It panics on a type
// it does not know how kmsg encodes: a kmsg upgrade that brings one fails
// the tests, never a request at run time silently.
func compile(t reflect.Type, v int16, root bool, depth int) *node {
	if depth > 16 {
		panic(fmt.Sprintf("kafka: prepass: %s nested too deep", t))
	}
	switch t.Kind() {
	case reflect.Int8, reflect.Uint8, reflect.Bool:
		return &node{kind: kFixed, width: 1}
	case reflect.Int16, reflect.Uint16:
		return &node{kind: kFixed, width: 2}
	case reflect.Int32, reflect.Uint32, reflect.Float32:
		return &node{kind: kFixed, width: 4}
	case reflect.Int64, reflect.Uint64, reflect.Float64:
		return &node{kind: kFixed, width: 8}
	case reflect.Array:
		if t.Elem().Kind() == reflect.Uint8 && t.Len() == 16 {
			return &node{kind: kFixed, width: 16} // UUID
		}
	case reflect.String:
		return &node{kind: kString}
	case reflect.Pointer:
		if t.Elem().Kind() == reflect.String {
			return &node{kind: kNullString}
		}
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			return &node{kind: kBytes}
		}
		return &node{kind: kArray, elem: compile(t.Elem(), v, false, depth+1), elemSize: int64(t.Elem().Size()), name: t.Elem().Name()}
	case reflect.Struct:
		return compileStruct(t, v, root, depth)
	}
	panic(fmt.Sprintf("kafka: prepass: kmsg type %s (%s) not known", t, t.Kind()))
}

var tagsType = reflect.TypeOf(kmsg.Tags{})

func compileStruct(t reflect.Type, v int16, root bool, depth int) *node {
	n := &node{kind: kStruct, name: t.Name(), tags: map[uint64]*node{}}
	versions := kmsgFields[t.Name()]
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if (root && f.Name == "Version") || f.Type == tagsType || !f.IsExported() {
			continue
		}
		fv, restricted := versions[f.Name]
		if restricted && fv.tag >= 0 {
			n.tags[uint64(fv.tag)] = compile(f.Type, v, false, depth+1)
			continue
		}
		if restricted && !fv.in(v) {
			continue
		}
		n.fields = append(n.fields, compile(f.Type, v, false, depth+1))
	}
	return n
}

// prepass walks one body.
type prepass struct {
	b        []byte
	flexible bool
	cost     int64
	limit    int64
	elements int64 // array elements so far
}

// errTooCostly is returned (wrapped) when a body's cost passes its limit.
var errTooCostly = fmt.Errorf("%w: decoding would allocate too much for its size", ErrMalformed)

// errTooManyElements is returned (wrapped) for a body declaring more than
// maxRequestElements array elements.
var errTooManyElements = fmt.Errorf("%w: more than %d array elements", ErrMalformed, maxRequestElements)

// prepassCost walks body as r's type and version; it returns the bytes
// decoding it would allocate and its array elements, or an error if it
// does not parse, costs more than decodeLimit(len(body)) or has more than
// maxRequestElements elements. The cost counts the request value.
func prepassCost(r kmsg.Request, body []byte) (cost, elements int64, err error) {
	p := &prepass{b: body, flexible: r.IsFlexible(), limit: decodeLimit(len(body))}
	p.cost = alloc(int64(reflect.TypeOf(r).Elem().Size()))
	err = p.walk(schemaFor(r))
	return p.cost, p.elements, err
}

// alloc is what the Go allocator takes for an object of n bytes, at most:
// size classes waste less than an eighth above 16 bytes.
func alloc(n int64) int64 {
	switch {
	case n <= 0:
		return 0
	case n <= 16:
		return 16
	}
	return n + n/8 + 16
}

func (p *prepass) charge(n int64) error {
	p.cost += n
	if p.cost > p.limit {
		return errTooCostly
	}
	return nil
}

func (p *prepass) short(what string) error {
	return fmt.Errorf("%w: body ends inside %s", ErrMalformed, what)
}

func (p *prepass) skip(n int, what string) error {
	if n < 0 || n > len(p.b) {
		return p.short(what)
	}
	p.b = p.b[n:]
	return nil
}

func (p *prepass) uvarint(what string) (uint64, error) {
	u, n := binary.Uvarint(p.b)
	if n <= 0 {
		return 0, p.short(what)
	}
	p.b = p.b[n:]
	return u, nil
}

// length reads a string, bytes or array length: compact (uvarint n+1, 0
// null) in flexible versions, else int16 (strings) or int32; -1 for null.
func (p *prepass) length(wide bool, what string) (int64, error) {
	if p.flexible {
		u, err := p.uvarint(what)
		if err != nil {
			return 0, err
		}
		if u > 1<<31 {
			return 0, fmt.Errorf("%w: %s length %d", ErrMalformed, what, u)
		}
		return int64(u) - 1, nil
	}
	if wide {
		if len(p.b) < 4 {
			return 0, p.short(what)
		}
		l := int64(int32(binary.BigEndian.Uint32(p.b)))
		p.b = p.b[4:]
		return max(l, -1), nil
	}
	if len(p.b) < 2 {
		return 0, p.short(what)
	}
	l := int64(int16(binary.BigEndian.Uint16(p.b)))
	p.b = p.b[2:]
	return max(l, -1), nil
}

// walk consumes one value of n.
func (p *prepass) walk(n *node) error {
	switch n.kind {
	case kFixed:
		return p.skip(n.width, "a fixed-size field")
	case kString, kNullString:
		l, err := p.length(false, "a string")
		if err != nil {
			return err
		}
		var c int64
		if n.kind == kNullString {
			// The pointer, also for null: some versions encode a *string
			// field as a plain string and kmsg allocates it always.
			c = alloc(16)
		}
		if l > 0 {
			if err := p.skip(int(l), "a string"); err != nil {
				return err
			}
			c += alloc(l)
		}
		return p.charge(c)
	case kBytes:
		l, err := p.length(true, "bytes")
		if err != nil || l < 0 {
			return err
		}
		return p.skip(int(l), "bytes")
	case kArray:
		return p.walkArray(n)
	case kStruct:
		return p.walkStruct(n)
	}
	panic("kafka: prepass: unknown node kind")
}

func (p *prepass) walkArray(n *node) error {
	l, err := p.length(true, "an array")
	if err != nil || l <= 0 {
		return err
	}
	// Every element takes at least a byte: a count above what is left
	// cannot be honest, and charging it first stops the walk early.
	if l > int64(len(p.b)) {
		return p.short("an array of " + n.name)
	}
	if p.elements += l; p.elements > maxRequestElements {
		return errTooManyElements
	}
	if err := p.charge(alloc(l * n.elemSize)); err != nil {
		return err
	}
	for i := int64(0); i < l; i++ {
		if err := p.walk(n.elem); err != nil {
			return err
		}
	}
	return nil
}

// tagEntryBytes is what one unknown tagged field costs in kmsg.Tags' map
// (entry, slot overhead, growth).
const tagEntryBytes = 96

func (p *prepass) walkStruct(n *node) error {
	for _, f := range n.fields {
		if err := p.walk(f); err != nil {
			return err
		}
	}
	if !p.flexible {
		return nil
	}
	count, err := p.uvarint("a tag count")
	if err != nil {
		return err
	}
	if count > uint64(len(p.b)) {
		return p.short("a tag section")
	}
	if count > 0 {
		if err := p.charge(256 + int64(count)*tagEntryBytes); err != nil {
			return err
		}
	}
	for i := uint64(0); i < count; i++ {
		tag, err := p.uvarint("a tag")
		if err != nil {
			return err
		}
		size, err := p.uvarint("a tag size")
		if err != nil {
			return err
		}
		if size > uint64(len(p.b)) {
			return p.short("a tagged field")
		}
		span := p.b[:size]
		p.b = p.b[size:]
		if tn, ok := n.tags[tag]; ok {
			sub := &prepass{b: span, flexible: p.flexible, cost: p.cost, limit: p.limit, elements: p.elements}
			err := sub.walk(tn)
			p.cost, p.elements = sub.cost, sub.elements
			if err != nil {
				return err
			}
		}
	}
	return nil
}
