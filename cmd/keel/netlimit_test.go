package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"
)

// keptOpen reports whether the server left c open: no EOF or reset
// within a moment.
func keptOpen(c net.Conn) bool {
	c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	var b [1]byte
	_, err := c.Read(b[:])
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// closedByServer reports whether the server closed c (EOF or reset)
// within a generous time: accepting may lag on a loaded machine.
func closedByServer(c net.Conn) bool {
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	var b [1]byte
	_, err := c.Read(b[:])
	var ne net.Error
	return !(errors.As(err, &ne) && ne.Timeout())
}

// TestServeConnectionLimits: every listener of `keel serve` (NameServer,
// broker, HTTP, AMQP, Kafka) keeps maxConnectionsPerAddress connections
// from one address and maxConnections in all, closes the next ones at
// once, logs the refusal and counts it in the metrics. The test's
// connections come from 127.0.0.2-5, which nothing else uses; the total
// is checked on the listeners nothing of the broker's own connects to (the
// broker registers with the NameServer, the console reads the broker).
func TestServeConnectionLimits(t *testing.T) {
	path := writeConf(t, "flushDiskType=ASYNC_FLUSH\nmapedFileSizeCommitLog=16777216\nmaxConnections=6\nmaxConnectionsPerAddress=2\n")
	ctx, cancel := context.WithCancel(context.Background())
	logs := &syncBuffer{}
	done := make(chan int, 1)
	tempDir := t.TempDir() // made before the run starts, so removed only after it stopped
	go func() {
		done <- run(ctx, []string{"serve", "-c", path, "--data-dir", tempDir, "--namesrv-listen", "127.0.0.1:0",
			"--amqp-listen", "127.0.0.1:0", "--broker-listen", "127.0.0.1:0", "--kafka-listen", "127.0.0.1:0",
			"--http-listen", "127.0.0.1:0"}, &bytes.Buffer{}, logs)
	}()
	defer func() {
		cancel()
		select {
		case <-done:
		case <-time.After(shutdownTimeout + 5*time.Second):
			t.Errorf("serve did not stop:\n%s", logs.String())
		}
	}()
	addrs := map[string]string{}
	for name, re := range map[string]interface{ FindStringSubmatch(string) []string }{
		"NameServer": listenRE, "broker": brokerListenRE, "HTTP": httpListenRE, "AMQP": amqpListenRE, "Kafka": kafkaListenRE,
	} {
		waitFor(t, "the "+name+" listener", 30*time.Second, func() bool {
			if m := re.FindStringSubmatch(logs.String()); m != nil {
				addrs[name] = m[1]
			}
			return addrs[name] != ""
		})
	}
	for name, addr := range addrs {
		_, port, _ := net.SplitHostPort(addr)
		dial := func(from string) net.Conn {
			d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
			c, err := d.Dial("tcp", net.JoinHostPort("127.0.0.1", port))
			if err != nil {
				t.Fatalf("%s: dial: %v", name, err)
			}
			return c
		}
		a1, a2, a3 := dial("127.0.0.2"), dial("127.0.0.2"), dial("127.0.0.2")
		if !keptOpen(a1) || !keptOpen(a2) {
			t.Errorf("%s: a connection within the limits was closed", name)
		}
		if !closedByServer(a3) {
			t.Errorf("%s: a third connection from 127.0.0.2 was kept (maxConnectionsPerAddress=2)", name)
		}
		conns := []net.Conn{a1, a2, a3}
		if name != "NameServer" && name != "broker" {
			for _, from := range []string{"127.0.0.3", "127.0.0.3", "127.0.0.4", "127.0.0.4"} {
				c := dial(from)
				conns = append(conns, c)
				if !keptOpen(c) {
					t.Errorf("%s: connection %d in all was closed (maxConnections=6)", name, len(conns)-1)
				}
			}
			c := dial("127.0.0.5")
			conns = append(conns, c)
			if !closedByServer(c) {
				t.Errorf("%s: a seventh connection was kept (maxConnections=6)", name)
			}
		}
		for _, c := range conns {
			c.Close()
		}
		if !strings.Contains(logs.String(), `listener=`+name+` limit=maxConnectionsPerAddress`) {
			t.Errorf("%s: no refusal logged:\n%s", name, logs.String())
		}
	}
	// The refusals are counted (HTTP needs a free slot: the ones above
	// are closed by now, waitFor retries until they are released).
	var body string
	waitFor(t, "the metrics", 10*time.Second, func() bool {
		resp, err := http.Get("http://" + addrs["HTTP"] + "/metrics")
		if err != nil {
			return false // a slot not yet released
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		body = string(b)
		return strings.Contains(body, "keel_connections_refused_total")
	})
	for _, name := range []string{"NameServer", "broker", "HTTP", "AMQP", "Kafka"} {
		for _, limit := range []string{"maxConnections", "maxConnectionsPerAddress"} {
			n := "1"
			if limit == "maxConnections" && (name == "NameServer" || name == "broker") {
				continue
			}
			series := `keel_connections_refused_total{limit="` + limit + `",listener="` + name + `"} `
			want := series + n
			if name == "HTTP" && limit == "maxConnections" || name == "NameServer" || name == "broker" {
				// Other connections from 127.0.0.1 while the test held the
				// slots are refused and counted too: the metrics GETs
				// retried above, the broker's own (re)registration with the
				// NameServer, the NameServer's and admin's dials of the
				// broker. At least one.
				if m := regexp.MustCompile(regexp.QuoteMeta(series) + `(\d+)`).FindStringSubmatch(body); m == nil || m[1] == "0" {
					t.Errorf("metrics lack %s at least 1:\n%s", series, linesContaining(body, "refused"))
				}
				continue
			}
			if !strings.Contains(body, want) {
				t.Errorf("metrics lack %s:\n%s", want, linesContaining(body, "refused"))
			}
		}
	}
}

func linesContaining(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
