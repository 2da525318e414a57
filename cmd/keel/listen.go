package main

// Listeners are bound before any service starts (bindListeners), so a busy
// or forbidden address fails the start in milliseconds, with one line
// naming the address and the flag that changes it, before the store is
// opened or a NameServer is registered with. The starters then serve the
// listeners bound here (parts.listen).

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
)

// Names of the listeners, as the starters ask for them.
const (
	listenNamesrv = "NameServer"
	listenBroker  = "broker"
	listenHTTP    = "HTTP"
	listenKafka   = "Kafka"
	// listenController serves raft and the controller's requests.
	listenController = "controller"
)

// listenSpec is one listener a command opens: what it serves, where, and
// how the user changes where.
type listenSpec struct {
	name string
	addr string // "" = this listener is off
	flag string // e.g. "--http-listen or httpListen in broker.conf"
}

// boundListeners are listeners bound ahead of their service, by name. A
// starter takes its listener out (parts.listen); closeAll closes those
// never taken (a start that failed before reaching them).
type boundListeners map[string]net.Listener

// bindListeners binds every spec with an address, or none: on the first
// failure it closes what it bound and returns a one-line error.
func bindListeners(specs ...listenSpec) (boundListeners, error) {
	ls := boundListeners{}
	for _, s := range specs {
		if s.addr == "" {
			continue
		}
		ln, err := net.Listen("tcp", s.addr)
		if err != nil {
			ls.closeAll()
			return nil, listenError(s, err)
		}
		ls[s.name] = ln
	}
	return ls, nil
}

// listenError says which listener could not bind where, why in a few
// words, and what to change.
func listenError(s listenSpec, err error) error {
	cause := err
	var se *os.SyscallError
	if errors.As(err, &se) {
		cause = se.Err // "address already in use", "permission denied"
	}
	return fmt.Errorf("%s listener cannot listen on %s: %v (choose another address with %s)", s.name, s.addr, cause, s.flag)
}

func (ls boundListeners) closeAll() {
	for name, ln := range ls {
		ln.Close()
		delete(ls, name)
	}
}

// listen returns the listener bound ahead for name, or binds addr now
// (keel bench's embedded broker binds as it starts), with the connection
// limits (wire_netlimit.go).
func (p *parts) listen(name, addr string) (net.Listener, error) {
	if ln, ok := p.listeners[name]; ok {
		delete(p.listeners, name)
		return p.limitListener(name, ln), nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return p.limitListener(name, ln), nil
}

// Where each command's listeners are changed.
const (
	namesrvListenFlag    = "--namesrv-listen"
	brokerListenFlag     = "--broker-listen or listenPort in broker.conf"
	httpListenFlag       = "--http-listen or httpListen in broker.conf"
	kafkaListenFlag      = "--kafka-listen or kafkaListen in broker.conf"
	controllerListenFlag = "--controller-listen or controllerListen in controller.conf"
)

// brokerAuthDescription says what the broker's listener requires, for the
// startup log.
func brokerAuthDescription(acl bool) string {
	if acl {
		return "ACL (signed requests, plain_acl.yml)"
	}
	return "none (aclEnable=false)"
}

// stoppedLine is the last line a broker's clean shutdown logs.
const stoppedLine = "keel stopped: the store is flushed and checkpointed (clean shutdown recorded)"

// logStopped ends a command's log: after a clean stop, one line saying so
// (with a store: that it was flushed and checkpointed); after a failure,
// nothing more (the error itself is the last line).
func logStopped(log *slog.Logger, err error, withStore bool) error {
	if err != nil {
		return err
	}
	if withStore {
		log.Info(stoppedLine)
	} else {
		log.Info("keel stopped")
	}
	return nil
}
