package store

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"

	"github.com/keelmq/keel/internal/vfs"
)

// overlayFS lets Check open the store's components, which may repair a
// torn tail while opening, without changing anything on disk: writes,
// truncations and removals go to an in-memory copy-on-write layer (whole
// 4 KiB pages) that is discarded afterwards.
type overlayFS struct {
	vfs.FS
	mu      sync.Mutex
	files   map[string]*overlayData // guarded by mu
	removed map[string]bool         // guarded by mu
}

const overlayPage = 4096

var errOverlay = errors.New("store: not supported while checking")

func newOverlayFS(base vfs.FS) *overlayFS {
	return &overlayFS{FS: base, files: map[string]*overlayData{}, removed: map[string]bool{}}
}

// overlayData is the private copy of one file: dirty pages over the base.
type overlayData struct {
	mu    sync.Mutex
	base  vfs.File // nil for a file created in the overlay
	size  int64
	pages map[int64][]byte
}

type overlayFile struct {
	d    *overlayData
	name string
}

func (o *overlayFS) OpenFile(name string, flag int, perm os.FileMode) (vfs.File, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if d := o.files[name]; d != nil {
		return &overlayFile{d, name}, nil
	}
	var base vfs.File
	if !o.removed[name] {
		f, err := o.FS.OpenFile(name, os.O_RDONLY, 0)
		if err == nil {
			base = f
		} else if !errors.Is(err, os.ErrNotExist) || flag&os.O_CREATE == 0 {
			return nil, err
		}
	} else if flag&os.O_CREATE == 0 {
		return nil, &os.PathError{Op: "open", Path: name, Err: os.ErrNotExist}
	}
	d := &overlayData{base: base, pages: map[int64][]byte{}}
	if base != nil {
		size, err := base.Size()
		if err != nil {
			base.Close()
			return nil, err
		}
		d.size = size
	}
	delete(o.removed, name)
	o.files[name] = d
	if flag&os.O_TRUNC != 0 {
		d.truncate(0)
	}
	return &overlayFile{d, name}, nil
}

func (o *overlayFS) Remove(name string) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.files, name)
	o.removed[name] = true
	return nil
}

func (o *overlayFS) Rename(a, b string) error {
	return fmt.Errorf("%w: rename %s", errOverlay, a)
}

func (o *overlayFS) List(dir string) ([]string, error) {
	names, err := o.FS.List(dir)
	if err != nil {
		return nil, err
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.DeleteFunc(names, func(n string) bool { return o.removed[dir+"/"+n] }), nil
}

func (o *overlayFS) SyncDir(string) error               { return nil }
func (o *overlayFS) MkdirAll(string, os.FileMode) error { return nil }
func (o *overlayFS) Lock(string) (io.Closer, error)     { return nopCloser{}, nil }
func (f *overlayFile) Name() string                     { return f.name }
func (f *overlayFile) Sync() error                      { return nil }
func (f *overlayFile) Close() error                     { return nil }
func (f *overlayFile) Truncate(n int64) error {
	f.d.mu.Lock()
	defer f.d.mu.Unlock()
	f.d.truncate(n)
	return nil
}
func (f *overlayFile) Size() (int64, error) {
	f.d.mu.Lock()
	defer f.d.mu.Unlock()
	return f.d.size, nil
}

type nopCloser struct{}

func (nopCloser) Close() error { return nil }

// page returns the content of page i (a private copy if dirty is set).
func (d *overlayData) page(i int64, dirty bool) ([]byte, error) {
	if p := d.pages[i]; p != nil {
		return p, nil
	}
	p := make([]byte, overlayPage)
	if d.base != nil {
		if _, err := d.base.ReadAt(p, i*overlayPage); err != nil && err != io.EOF {
			return nil, err
		}
	}
	if dirty {
		d.pages[i] = p
	}
	return p, nil
}

func (f *overlayFile) ReadAt(p []byte, off int64) (int, error) {
	d := f.d
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for n < len(p) && off+int64(n) < d.size {
		pos := off + int64(n)
		pg, err := d.page(pos/overlayPage, false)
		if err != nil {
			return n, err
		}
		k := copy(p[n:], pg[pos%overlayPage:min(overlayPage, pos%overlayPage+d.size-pos)])
		n += k
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (f *overlayFile) WriteAt(p []byte, off int64) (int, error) {
	d := f.d
	d.mu.Lock()
	defer d.mu.Unlock()
	for n := 0; n < len(p); {
		pos := off + int64(n)
		pg, err := d.page(pos/overlayPage, true)
		if err != nil {
			return n, err
		}
		n += copy(pg[pos%overlayPage:], p[n:])
	}
	d.size = max(d.size, off+int64(len(p)))
	return len(p), nil
}

func (d *overlayData) truncate(n int64) {
	for i := range d.pages {
		if i*overlayPage >= n {
			delete(d.pages, i)
		}
	}
	if n < d.size && n%overlayPage != 0 {
		if pg, err := d.page(n/overlayPage, true); err == nil {
			clear(pg[n%overlayPage:])
		}
	}
	if n > d.size {
		// Growing exposes zeros: make the pages past the old end private.
		for i := d.size / overlayPage; i*overlayPage < n; i++ {
			if pg, err := d.page(i, true); err == nil && i == d.size/overlayPage {
				clear(pg[d.size%overlayPage:])
			}
		}
	}
	d.size = n
}
