package broker

import (
	"testing"

	"github.com/keelmq/keel/internal/remoting"
)

// TestSmallSingleSendsRunInline: the reader serves single-message sends up
// to inlineSendBytes itself; batches, large bodies and every other request
// go to workers.
func TestSmallSingleSendsRunInline(t *testing.T) {
	cases := []struct {
		code int16
		body int
		want bool
	}{
		{remoting.ReqSendMessage, 1 << 10, true},
		{remoting.ReqSendMessageV2, 0, true},
		{remoting.ReqSendMessageV2, inlineSendBytes, true},
		{remoting.ReqSendMessageV2, inlineSendBytes + 1, false},
		{remoting.ReqSendBatchMessage, 1 << 10, false},
		{remoting.ReqPullMessage, 0, false},
		{remoting.ReqConsumerSendMsgBack, 0, false},
		{remoting.ReqEndTransaction, 0, false},
	}
	var h remoting.Handler = brokerHandler{}
	for _, c := range cases {
		req := remoting.NewRequest(c.code, nil, make([]byte, c.body))
		if got := remoting.RunsInline(h, req); got != c.want {
			t.Errorf("code %d, body %d bytes: inline %v, want %v", c.code, c.body, got, c.want)
		}
	}
}
