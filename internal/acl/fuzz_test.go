package acl

import (
	"errors"
	"os"
	"testing"

	"github.com/keelmq/keel/internal/remoting"
)

// FuzzParse: any input either parses into consistent rules or fails with
// a *ParseError naming a line inside the input; never a panic.
func FuzzParse(f *testing.F) {
	sample, err := os.ReadFile("testdata/plain_acl.yml")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(sample)
	f.Add([]byte(testACL))
	f.Add([]byte("accounts:\n- accessKey: \"a\\tb1234\"\n  secretKey: 'x''y12345'\n  topicPerms: [a=PUB, 'b=SUB']\n"))
	f.Add([]byte("globalWhiteRemoteAddresses: ['*', 10.1-2.*.*, 192.168.0.{1,2}]\n"))
	f.Add([]byte("a:\n  - - - x\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := Parse("f.yml", data)
		if err != nil {
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("not a *ParseError: %v", err)
			}
			if lines := 1 + countNL(data); pe.Line < 1 || pe.Line > lines+1 {
				t.Fatalf("line %d outside the input (%d lines): %v", pe.Line, lines, err)
			}
			return
		}
		for k, a := range r.Accounts {
			if k != a.AccessKey || len(a.AccessKey) < MinKeyLength || len(a.secretKey) < MinKeyLength || a.White == nil {
				t.Fatalf("inconsistent account %+v", a)
			}
		}
	})
}

func countNL(b []byte) int {
	n := 0
	for _, c := range b {
		if c == '\n' {
			n++
		}
	}
	return n
}

// FuzzCheck: any request (ext values, body) is answered without a panic,
// and an unsigned one from an address not white-listed is never allowed.
func FuzzCheck(f *testing.F) {
	f.Add(int16(remoting.ReqHeartBeat), "consumer1", "billing", "orders", []byte(`{"consumerDataSet":[{"groupName":"billing"}]}`))
	f.Add(int16(remoting.ReqLockBatchMQ), "consumer1", "billing", "%RETRY%x", []byte(`{"mqSet":[{"topic":"secret"}]}`))
	f.Add(int16(remoting.ReqSendMessageV2), "producer1", "", "", []byte{0xff})
	r, err := Parse("t.yml", []byte(testACL))
	if err != nil {
		f.Fatal(err)
	}
	a := NewWithRules(r, nil)
	f.Fuzz(func(t *testing.T, code int16, ak, group, topic string, body []byte) {
		ext := map[string]string{KeyAccessKey: ak, "consumerGroup": group, "group": group, "topic": topic, "b": topic, KeySignature: "x"}
		if err := a.Check(addr("127.0.0.1"), remoting.NewRequest(code, ext, body)); err == nil {
			t.Fatalf("a request with a bogus signature was allowed: code %d ak %q", code, ak)
		}
		if sk := map[string]string{"producer1": "producer-secret", "consumer1": "consumer-secret", "admin001": "admin-secret"}[ak]; sk != "" {
			delete(ext, KeySignature)
			ext[KeySignature] = Sign(sk, ext, body)
			_ = a.Check(addr("127.0.0.1"), remoting.NewRequest(code, ext, body))
		}
	})
}
