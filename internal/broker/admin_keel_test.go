package broker

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/remoting"
)

// consumeStatsEntry matches one offsetTable entry of a GET_CONSUME_STATS body.
func consumeStatsEntry(topic string, q int32, brokerOff, consumerOff int64, withTime bool) *regexp.Regexp {
	ts := `0`
	if withTime {
		ts = `[1-9][0-9]*`
	}
	return regexp.MustCompile(regexp.QuoteMeta(`{"brokerName":"broker-a","queueId":`+itoa(q)+`,"topic":"`+topic+`"}:`+
		`{"brokerOffset":`+itoa(brokerOff)+`,"consumerOffset":`+itoa(consumerOff)+`,"lastTimestamp":`) + ts +
		`(,"(consumedTimestamp|oldestUnconsumedTimestamp)":[0-9]+)*}`) // Keel's additions follow Java's fields
}

func TestGetConsumeStats(t *testing.T) {
	e := startEnv(t, nil)
	cl := e.dial()
	for i := 0; i < 3; i++ {
		wantCode(t, cl.sendV1("T", 0, "", []byte("x")), remoting.ResSuccess)
	}
	e.waitMax("T", 0, 3)
	wantCode(t, cl.invoke(remoting.ReqUpdateConsumerOffset, map[string]string{"consumerGroup": "g", "topic": "T", "queueId": "0", "commitOffset": "2"}, nil), remoting.ResSuccess)
	// A member subscribed to a second topic adds that topic's queues.
	wantCode(t, cl.sendV1("T2", 1, "", []byte("y")), remoting.ResSuccess)
	e.waitMax("T2", 1, 1)
	wantCode(t, cl.heartbeat("c1", "g", "T2", "*", "CLUSTERING"), remoting.ResSuccess)

	resp := cl.invoke(remoting.ReqGetConsumeStats, map[string]string{"consumerGroup": "g"}, nil)
	wantCode(t, resp, remoting.ResSuccess)
	body := string(resp.Body)
	for _, re := range []*regexp.Regexp{
		consumeStatsEntry("T", 0, 3, 2, true),
		consumeStatsEntry("T", 1, 0, 0, false),
		consumeStatsEntry("T2", 1, 1, 0, false),
	} {
		if !re.MatchString(body) {
			t.Errorf("body lacks %s:\n%s", re, body)
		}
	}
	if !strings.HasPrefix(body, `{"consumeTps":0.0,"offsetTable":{`) {
		t.Errorf("body shape: %s", body)
	}
	// T (offsets) and T2 (subscribed): 4 queues each. %RETRY%g is not listed:
	// this member does not subscribe to it and nothing was committed there.
	if n := strings.Count(body, `"brokerOffset"`); n != 8 {
		t.Errorf("%d queues in %s, want 8", n, body)
	}

	resp = cl.invoke(remoting.ReqGetConsumeStats, map[string]string{"consumerGroup": "g", "topic": "T2"}, nil)
	wantCode(t, resp, remoting.ResSuccess)
	if strings.Contains(string(resp.Body), `"topic":"T"}`) || !consumeStatsEntry("T2", 1, 1, 0, false).Match(resp.Body) {
		t.Errorf("topic filter: %s", resp.Body)
	}
	resp = cl.invoke(remoting.ReqGetConsumeStats, map[string]string{"consumerGroup": "nobody"}, nil)
	wantCode(t, resp, remoting.ResSuccess)
	if string(resp.Body) != `{"consumeTps":0.0,"offsetTable":{}}` {
		t.Errorf("unknown group: %s", resp.Body)
	}
	wantCode(t, cl.invoke(remoting.ReqGetConsumeStats, nil, nil), remoting.ResInvalidParameter)

	p := e.b.ConsumeProgress("g", "T")
	if len(p) != 4 || p[0].Lag() != 1 || p[1].Lag() != 0 {
		t.Errorf("ConsumeProgress %+v", p)
	}
	if got := e.b.GroupNames(); !contains(got, "g") {
		t.Errorf("GroupNames %v", got)
	}
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

func TestGetConsumerConnectionList(t *testing.T) {
	e := startEnv(t, nil)
	cl := e.dial()
	wantCode(t, cl.invoke(remoting.ReqGetConsumerConnectionList, map[string]string{"consumerGroup": "g"}, nil), remoting.ResConsumerNotOnline)
	wantCode(t, cl.heartbeat("c1", "g", "T", "a || b", "CLUSTERING"), remoting.ResSuccess)
	resp := cl.invoke(remoting.ReqGetConsumerConnectionList, map[string]string{"consumerGroup": "g"}, nil)
	wantCode(t, resp, remoting.ResSuccess)
	var cc consumerConnection
	if err := json.Unmarshal(resp.Body, &cc); err != nil {
		t.Fatal(err)
	}
	if len(cc.ConnectionSet) != 1 || cc.ConnectionSet[0].ClientID != "c1" || !strings.HasPrefix(cc.ConnectionSet[0].ClientAddr, "127.0.0.1:") {
		t.Errorf("connections %+v", cc.ConnectionSet)
	}
	// The language and version come from the heartbeat's header.
	if c := cc.ConnectionSet[0]; c.Language != remoting.LanguageGo || c.Version != int(remoting.Version) {
		t.Errorf("language/version %+v, want %s/%d", c, remoting.LanguageGo, remoting.Version)
	}
	if s := cc.SubscriptionTable["T"]; s.SubString != "a || b" || cc.MessageModel != "CLUSTERING" || cc.ConsumeType != "CONSUME_PASSIVELY" {
		t.Errorf("subscriptions %+v model %q type %q", cc.SubscriptionTable, cc.MessageModel, cc.ConsumeType)
	}
	if s := e.b.Stats(); s.ConsumerClients != 1 || s.OnlineGroups != 1 {
		t.Errorf("Stats %+v", s)
	}
}

type recordingObserver struct {
	mu    sync.Mutex
	sends []string
	pulls []string
	d     time.Duration
}

func (o *recordingObserver) OnSend(topic string, msgs, bytes int, result string, d time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.sends = append(o.sends, topic+"/"+itoa(msgs)+"/"+itoa(bytes)+"/"+result)
	o.d = d
}

func (o *recordingObserver) OnPull(topic, group, result string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.pulls = append(o.pulls, topic+"/"+group+"/"+result)
}

func (o *recordingObserver) snapshot() ([]string, []string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.sends...), append([]string(nil), o.pulls...)
}

func TestObserverSeesSendsAndPulls(t *testing.T) {
	e := startEnv(t, nil)
	o := &recordingObserver{}
	e.b.SetObserver(o)
	cl := e.dial()
	wantCode(t, cl.sendV1("T", 0, "", []byte("hello")), remoting.ResSuccess)
	wantCode(t, cl.sendV1("SCHEDULE_TOPIC_XXXX", 0, "", []byte("no")), remoting.ResNoPermission)
	e.waitMax("T", 0, 1)
	wantCode(t, cl.heartbeat("c1", "g", "T", "*", "CLUSTERING"), remoting.ResSuccess)
	wantCode(t, cl.invoke(remoting.ReqPullMessage, pullExt("g", "T", 0, 0, 0, 0), nil), remoting.ResSuccess)
	wantCode(t, cl.invoke(remoting.ReqPullMessage, pullExt("g", "Nope", 0, 0, 0, 0), nil), remoting.ResTopicNotExist)
	// A suspended pull at the end of the queue is held, then answered by a send.
	held := make(chan *remoting.Command, 1)
	go func() {
		held <- cl.invoke(remoting.ReqPullMessage, pullExt("g", "T", 0, 1, remoting.PullFlagSuspend, 10000), nil)
	}()
	waitFor(t, "the pull to be held", func() bool { return e.b.Stats().HeldPulls == 1 })
	wantCode(t, cl.sendV1("T", 0, "", []byte("wake")), remoting.ResSuccess)
	wantCode(t, <-held, remoting.ResSuccess)

	sends, pulls := o.snapshot()
	want := []string{"T/1/5/SUCCESS", "SCHEDULE_TOPIC_XXXX/0/2/NO_PERMISSION", "T/1/4/SUCCESS"}
	if strings.Join(sends, ",") != strings.Join(want, ",") || o.d <= 0 {
		t.Errorf("sends %v (last %v), want %v", sends, o.d, want)
	}
	wantPulls := []string{"T/g/SUCCESS", "Nope/g/TOPIC_NOT_EXIST", "T/g/HELD"}
	if strings.Join(pulls, ",") != strings.Join(wantPulls, ",") {
		t.Errorf("pulls %v, want %v", pulls, wantPulls)
	}
	e.b.SetObserver(nil)
	wantCode(t, cl.sendV1("T", 0, "", []byte("x")), remoting.ResSuccess)
	if s, _ := o.snapshot(); len(s) != 3 {
		t.Errorf("observer still called after removal: %v", s)
	}
}

func TestRegisteredTracksNameServerAnswers(t *testing.T) {
	ns := startFakeNamesrv(t)
	clock := newFakeClock()
	e := startEnv(t, func(c *Config) { c.NamesrvAddrs = []string{ns.addr}; c.Now = clock.Now })
	waitFor(t, "the first registration", func() bool { return e.b.Registered() })
	if s := e.b.Stats(); !s.LastRegistered.Equal(clock.Now().Truncate(time.Millisecond)) {
		t.Errorf("LastRegistered %v, want %v", s.LastRegistered, clock.Now())
	}
	clock.Advance(e.b.cfg.ChannelExpiredTimeout)
	if e.b.Registered() {
		t.Error("still registered after the NameServer's expiry time without a registration")
	}
	ns.srv.Shutdown(context.Background())
	e.b.reg.kick()
	clock.Advance(time.Second)
	if e.b.Registered() {
		t.Error("registered while the NameServer is down")
	}

	alone := startEnv(t, nil)
	if !alone.b.Registered() {
		t.Error("a broker without NameServers is not registered")
	}
}

// Each member reports the language and version of its own heartbeats; a
// language Java's LanguageCode does not know is reported as OTHER.
func TestConsumerConnectionLanguageAndVersion(t *testing.T) {
	e := startEnv(t, nil)
	heartbeat := func(cl *client, clientID, lang string, version int16) {
		t.Helper()
		body := `{"clientID":"` + clientID + `","producerDataSet":[],"consumerDataSet":[{"groupName":"g",` +
			`"consumeType":"CONSUME_PASSIVELY","messageModel":"CLUSTERING","consumeFromWhere":"CONSUME_FROM_LAST_OFFSET",` +
			`"subscriptionDataSet":[{"topic":"T","subString":"*","subVersion":1,"expressionType":"TAG"}]}]}`
		req := remoting.NewRequest(remoting.ReqHeartBeat, nil, []byte(body))
		req.Language, req.Version = lang, version
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		resp, err := cl.c.Invoke(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		wantCode(t, resp, remoting.ResSuccess)
	}
	connections := func() map[string]connectionInfo {
		t.Helper()
		resp := e.dial().invoke(remoting.ReqGetConsumerConnectionList, map[string]string{"consumerGroup": "g"}, nil)
		wantCode(t, resp, remoting.ResSuccess)
		var cc consumerConnection
		if err := json.Unmarshal(resp.Body, &cc); err != nil {
			t.Fatal(err)
		}
		out := make(map[string]connectionInfo)
		for _, c := range cc.ConnectionSet {
			out[c.ClientID] = c
		}
		return out
	}
	java, other := e.dial(), e.dial()
	heartbeat(java, "java-1", "JAVA", 435)
	heartbeat(other, "odd-1", "COBOL", 7)
	got := connections()
	if c := got["java-1"]; c.Language != "JAVA" || c.Version != 435 {
		t.Errorf("java member %+v", c)
	}
	if c := got["odd-1"]; c.Language != "OTHER" || c.Version != 7 {
		t.Errorf("unknown-language member %+v", c)
	}
	// A later heartbeat (an upgraded client on the same id) replaces them.
	heartbeat(java, "java-1", "JAVA", 453)
	if c := connections()["java-1"]; c.Language != "JAVA" || c.Version != 453 {
		t.Errorf("after a newer heartbeat %+v", c)
	}
}

// consumeTps is how fast the group's committed offsets advanced over the
// last minute: first commits and moves back add nothing, and the rate falls
// to 0 a minute after the last advance.
func TestConsumeTps(t *testing.T) {
	var mu sync.Mutex
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	e := startEnv(t, func(c *Config) { c.Now = clock })
	cl := e.dial()
	for _, topic := range []string{"T", "T2"} {
		wantCode(t, cl.sendV1(topic, 0, "", []byte("x")), remoting.ResSuccess)
	}
	commit := func(topic string, q int32, off int64) {
		t.Helper()
		wantCode(t, cl.invoke(remoting.ReqUpdateConsumerOffset, map[string]string{"consumerGroup": "g", "topic": topic,
			"queueId": itoa(q), "commitOffset": itoa(off)}, nil), remoting.ResSuccess)
	}
	tps := func(topic string) string {
		t.Helper()
		ext := map[string]string{"consumerGroup": "g"}
		if topic != "" {
			ext["topic"] = topic
		}
		resp := cl.invoke(remoting.ReqGetConsumeStats, ext, nil)
		wantCode(t, resp, remoting.ResSuccess)
		// The body is fastjson's (object keys), not JSON: read the number.
		m := regexp.MustCompile(`^\{"consumeTps":([0-9.]+),"offsetTable":`).FindSubmatch(resp.Body)
		if m == nil {
			t.Fatalf("body shape: %s", resp.Body)
		}
		return string(m[1])
	}
	commit("T", 0, 100) // first commits: no earlier offset to measure from
	commit("T", 1, 10)
	commit("T2", 0, 5)
	if got := tps(""); got != "0.0" {
		t.Fatalf("after first commits consumeTps %s, want 0.0", got)
	}
	commit("T", 0, 130) // +30
	advance(20 * time.Second)
	commit("T", 1, 40)  // +30
	commit("T2", 0, 35) // +30
	commit("T", 1, 20)  // a reset back adds nothing
	if got := tps(""); got != "1.5" {
		t.Errorf("group consumeTps %s, want 1.5 (90 in a minute)", got)
	}
	if got := tps("T"); got != "1.0" {
		t.Errorf("topic T consumeTps %s, want 1.0", got)
	}
	advance(41 * time.Second) // the first +30 is now older than a minute
	if got := tps(""); got != "1.0" {
		t.Errorf("61 s on consumeTps %s, want 1.0", got)
	}
	advance(20 * time.Second)
	if got := tps(""); got != "0.0" {
		t.Errorf("after a quiet minute consumeTps %s, want 0.0", got)
	}
	commit("T2", 0, 36)
	if got := tps("T2"); got != "0.017" {
		t.Errorf("one message in a minute: %s, want 0.017", got)
	}
}
