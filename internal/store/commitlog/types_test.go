package commitlog

import (
	"encoding/binary"
	"errors"
	"testing"

	"github.com/keelmq/keel/internal/store/record"
	"github.com/keelmq/keel/internal/vfs"
)

// typed returns rec with its magic replaced (the rest as rec builds it).
func typed(n int, seed byte, magic int32) []byte {
	b := rec(n, seed)
	binary.BigEndian.PutUint32(b[4:], uint32(magic))
	return b
}

// TestAppendsEveryKnownType: records of every type are appended, read,
// scanned and verified alike; a record whose magic is no known type is
// refused.
func TestAppendsEveryKnownType(t *testing.T) {
	l, _ := openLog(t, vfs.NewMem(), RecoverOptions{})
	defer l.Close()
	var recs [][]byte
	for i, m := range []int32{record.MagicRocketMQ, record.MagicKafkaBatch, record.MagicAMQP, record.MagicSystem} {
		recs = append(recs, typed(200, byte(i), m))
	}
	all := appendAll(t, l, recs...)
	checkReadable(t, l, all)
	if _, probs, err := l.Verify(nil); err != nil || len(probs) > 0 {
		t.Fatalf("verify: %v %v", err, probs)
	}
	if _, err := l.Append([][]byte{typed(200, 9, -626810000)}, nil); err == nil {
		t.Fatal("appended a record of an unknown type")
	}
}

// futureRecord rewrites the record at phys of segment 0 as one of a type
// this version does not know, with a valid checksum (what a newer release
// could have written).
func futureRecord(t *testing.T, fs vfs.FS, a appended) {
	futureMagic := int32(-626810000) // 0xDAA3A370
	patchFile(t, fs, "/data/commitlog/"+SegmentName(0), a.phys, func(b []byte) {
		binary.BigEndian.PutUint32(b[4:], uint32(futureMagic))
		n := len(a.rec)
		binary.BigEndian.PutUint32(b[n:], Checksum(b[:n]))
	})
}

// TestUnknownTypeFailsLoudly: a reader meeting a record of an unknown type
// fails with ErrUnknownType naming it; recovery neither cuts it as a torn
// tail (it is the last record) nor skips it.
func TestUnknownTypeFailsLoudly(t *testing.T) {
	fs := vfs.NewMem()
	l, _ := openLog(t, fs, RecoverOptions{})
	all := appendAll(t, l, rec(300, 1), rec(300, 2))
	l.Flush()
	futureRecord(t, fs, all[1])
	if _, err := l.ReadEntry(all[1].phys, int32(len(all[1].rec)), nil); !errors.Is(err, ErrUnknownType) || errors.Is(err, ErrCorrupt) {
		t.Fatalf("read: %v", err)
	}
	r := l.NewReader(0)
	if _, _, err := r.Next(l.WrittenOffset()); err != nil {
		t.Fatalf("first record: %v", err)
	}
	if _, _, err := r.Next(l.WrittenOffset()); !errors.Is(err, ErrUnknownType) {
		t.Fatalf("reader: %v", err)
	}
	l.Close()

	l, err := Open(Config{FS: fs, Dir: "/data/commitlog", SegmentBytes: testSeg})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, _, err := l.Verify(nil); !errors.Is(err, ErrUnknownType) {
		t.Fatalf("verify: %v", err)
	}
	_, err = l.Recover(RecoverOptions{Crashed: true, DurableFrom: 0})
	if !errors.Is(err, ErrUnknownType) || errors.Is(err, ErrCorrupt) {
		t.Fatalf("recover: %v", err)
	}
	t.Logf("recover: %v", err)
}
