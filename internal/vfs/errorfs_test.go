package vfs

import (
	"errors"
	"os"
	"syscall"
	"testing"
	"time"
)

func TestErrorFSRules(t *testing.T) {
	e := NewErrorFS(NewMem())
	if err := e.MkdirAll("/cl", 0o755); err != nil {
		t.Fatal(err)
	}
	log := mustOpen(t, e, "/cl/00000000000000000000", os.O_RDWR|os.O_CREATE)
	other := mustOpen(t, e, "/other", os.O_RDWR|os.O_CREATE)

	id := e.InjectWriteError("/cl/")
	_, err := log.WriteAt([]byte("x"), 0)
	var pe *os.PathError
	if !errors.As(err, &pe) || pe.Op != "write" || !errors.Is(err, syscall.EIO) || !errors.Is(err, ErrInjected) {
		t.Fatalf("injected write error: %v", err)
	}
	mustWrite(t, other, 0, []byte("x")) // path does not match
	if !e.RemoveRule(id) || e.RemoveRule(id) {
		t.Fatal("RemoveRule")
	}
	mustWrite(t, log, 0, []byte("x"))

	e.InjectNth(OpSync, "/cl/", 3)
	for i := 1; i <= 5; i++ {
		err := log.Sync()
		if (i == 3) != (err != nil) {
			t.Fatalf("sync #%d: %v", i, err)
		}
	}
	e.InjectOnce(OpOpen|OpRename, "renamed")
	if err := e.Rename("/other", "/renamed"); !errors.Is(err, ErrInjected) {
		t.Fatalf("rename matched by new name: %v", err)
	}
	if err := e.Rename("/other", "/renamed"); err != nil {
		t.Fatalf("once rule fired twice: %v", err)
	}
	e.Inject(Rule{Ops: OpSyncDir | OpTruncate | OpRemove | OpMkdir | OpRead, Err: syscall.EROFS})
	checks := []error{
		e.SyncDir("/cl"),
		log.Truncate(0),
		e.Remove("/renamed"),
		e.MkdirAll("/x", 0o755),
	}
	_, rerr := log.ReadAt(make([]byte, 1), 0)
	checks = append(checks, rerr)
	for i, err := range checks {
		if !errors.Is(err, syscall.EROFS) || !errors.Is(err, ErrInjected) {
			t.Fatalf("check %d: %v", i, err)
		}
	}
	if got := e.Injected(OpWrite); got != 1 {
		t.Fatalf("write faults %d", got)
	}
	if got := e.Injected(OpAll); got != 1+1+1+5 {
		t.Fatalf("all faults %d", got)
	}
	e.ClearRules()
	if err := e.SyncDir("/cl"); err != nil {
		t.Fatal(err)
	}
}

// TestErrorFSFailedSyncIsNotDurable: the bytes a failed Sync should have
// made durable are lost in a crash, and a short write tears.
func TestErrorFSFailedSyncIsNotDurable(t *testing.T) {
	mem := NewMem()
	e := NewErrorFS(mem)
	f := mustOpen(t, e, "/f", os.O_RDWR|os.O_CREATE)
	mustSyncDir(t, e, "/")
	mustWrite(t, f, 0, []byte("one"))
	mustSync(t, f)
	mustWrite(t, f, 3, []byte("two"))
	e.InjectOnce(OpSync, "/f")
	if err := f.Sync(); err == nil {
		t.Fatal("sync did not fail")
	}
	e.Inject(Rule{Ops: OpWrite, Times: 1, ShortWrite: 2})
	if n, err := f.WriteAt([]byte("three"), 6); n != 2 || err == nil {
		t.Fatalf("short write: n=%d err=%v", n, err)
	}
	if got := readAll(t, mem, "/f"); string(got) != "onetwoth" {
		t.Fatalf("before crash %q", got)
	}
	mem.Crash()
	if got := readAll(t, mem, "/f"); string(got) != "one" {
		t.Fatalf("after crash %q", got)
	}
}

func TestErrorFSFreeBytes(t *testing.T) {
	mem := NewMem()
	mem.SetCapacity(1 << 20)
	e := NewErrorFS(mem)
	f := mustOpen(t, e, "/f", os.O_RDWR|os.O_CREATE)
	mustWrite(t, f, 0, make([]byte, 100))
	e.SetFreeBytes(50)
	if _, free, _ := e.DiskUsage("/"); free != 50 {
		t.Fatalf("free %d", free)
	}
	mustWrite(t, f, 0, make([]byte, 100)) // overwrite: no growth
	mustWrite(t, f, 100, make([]byte, 30))
	n, err := f.WriteAt(make([]byte, 21), 130)
	var pe *os.PathError
	if n != 0 || !errors.As(err, &pe) || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("write past budget: n=%d err=%v", n, err)
	}
	if size, _ := f.Size(); size != 130 {
		t.Fatalf("failed write changed size to %d", size)
	}
	if err := f.Truncate(200); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("truncate past budget: %v", err)
	}
	if e.NoSpaceErrors() != 2 {
		t.Fatalf("ENOSPC count %d", e.NoSpaceErrors())
	}
	mustWrite(t, f, 130, make([]byte, 20)) // exactly the budget
	if e.FreeBytes() != 0 {
		t.Fatalf("free %d", e.FreeBytes())
	}
	if err := f.Truncate(50); err != nil {
		t.Fatal(err)
	}
	if e.FreeBytes() != 100 {
		t.Fatalf("after shrink free %d", e.FreeBytes())
	}
	f.Close()
	if err := e.Remove("/f"); err != nil {
		t.Fatal(err)
	}
	if e.FreeBytes() != 150 {
		t.Fatalf("after remove free %d", e.FreeBytes())
	}
	e.SetFreeBytes(-1)
	if _, free, _ := e.DiskUsage("/"); free != 1<<20 {
		t.Fatalf("unlimited free %d", free)
	}
}

func TestOpString(t *testing.T) {
	if s := (OpWrite | OpSync).String(); s != "write|fdatasync" {
		t.Fatal(s)
	}
	if OpAll != 1<<numOps-1 {
		t.Fatal("OpAll does not cover every op")
	}
}

func TestErrorFSStall(t *testing.T) {
	mem := NewMem()
	e := NewErrorFS(mem)
	f := mustOpen(t, e, "/f", os.O_RDWR|os.O_CREATE)
	mustSyncDir(t, e, "/")
	mustWrite(t, f, 0, []byte("one"))
	stall := make(chan struct{})
	id := e.Inject(Rule{Ops: OpSync, Path: "/f", Stall: stall})
	synced := make(chan error, 1)
	go func() { synced <- f.Sync() }()
	deadline := time.Now().Add(10 * time.Second)
	for e.Injected(OpSync) == 0 { // the sync has reached the rule
		if time.Now().After(deadline) {
			t.Fatal("sync never reached the stall")
		}
		time.Sleep(time.Millisecond)
	}
	select {
	case err := <-synced:
		t.Fatalf("stalled sync returned %v", err)
	default:
	}
	mustWrite(t, f, 3, []byte("two")) // other calls go on meanwhile
	close(stall)
	if err := <-synced; err != nil {
		t.Fatalf("released sync: %v", err)
	}
	e.RemoveRule(id)
	mem.Crash()
	if got := readAll(t, mem, "/f"); string(got) != "onetwo" { // synced after "two" was written
		t.Fatalf("after crash %q: the released sync did not reach the inner file", got)
	}
}
