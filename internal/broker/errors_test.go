package broker

import (
	"fmt"
	"testing"

	"github.com/keelmq/keel/internal/core"
	"github.com/keelmq/keel/internal/remoting"
)

// TestCoreErrorCodesCoverEveryKind: every kind of core error has its
// RocketMQ code, and a wrapped core error keeps it and its message.
func TestCoreErrorCodesCoverEveryKind(t *testing.T) {
	for _, k := range core.Kinds {
		if _, ok := coreErrorCodes[k]; !ok {
			t.Errorf("no response code for %v", k)
		}
	}
	err := fmt.Errorf("context: %w", core.Errorf(core.ErrTopicNotFound, "topic[%s] not exist", "T"))
	code, remark, ok := coreErrorCode(err)
	if !ok || code != remoting.ResTopicNotExist || remark != "topic[T] not exist" {
		t.Fatalf("coreErrorCode = %d %q %v", code, remark, ok)
	}
	if _, _, ok := coreErrorCode(fmt.Errorf("plain")); ok {
		t.Fatal("a plain error taken for a core error")
	}
}
