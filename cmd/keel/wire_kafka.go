package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"

	"github.com/keelmq/keel/internal/acl"
	"github.com/keelmq/keel/internal/kafka"
)

// kafkaStarter serves the Kafka front door on addr (nothing if empty) on
// the core the broker's starters built (p.core), which it shares with the
// RocketMQ front door; it must come after them.
func (p *parts) kafkaStarter(addr string) starter {
	return func() (service, error) {
		if addr == "" {
			return service{name: "kafka"}, nil
		}
		if p.core == nil {
			return service{}, errors.New("kafka: the core must be built first")
		}
		host, port, err := kafkaAdvertised(p.cfg.KafkaAdvertisedListen, p.cfg.BrokerIP1, addr)
		if err != nil {
			return service{}, err
		}
		wrap, err := p.tlsWrap("kafka", p.cfg.TLSMode)
		if err != nil {
			return service{}, err
		}
		ln, err := p.listen(listenKafka, addr)
		if err != nil {
			return service{}, err
		}
		if wrap != nil { // the listeners' TLS (tlsMode), as the RocketMQ door's
			if ln, err = wrap(ln); err != nil {
				return service{}, err
			}
		}
		if a, ok := ln.Addr().(*net.TCPAddr); ok && port == 0 {
			port = int32(a.Port)
		}
		log := p.log.With("component", "kafka")
		var accounts kafka.Accounts
		if p.acl != nil {
			accounts = kafkaAccounts{p.acl}
		}
		srv := kafka.New(kafka.Config{
			AdvertisedHost: host, AdvertisedPort: port, ClusterID: p.cfg.BrokerClusterName,
			MaxRequestBytes: p.cfg.MaxFrameBytes, MaxBatchBytes: p.cfg.MaxMessageBytes,
			RetentionMs: p.cfg.FileReservedTime.Milliseconds(), SegmentBytes: p.cfg.CommitLogSegmentBytes,
			ACL: accounts, ProducerIDExpiration: p.cfg.KafkaProducerIDExpiration,
			InitialRebalanceDelay: p.cfg.KafkaGroupInitialRebalanceDelay,
			DataDir:               p.cfg.StorePathRootDir, FS: storeFS,
		}, p.core, log)
		p.kafka.Store(srv)
		log.Info("Kafka listening", "addr", ln.Addr().String(), "advertised", net.JoinHostPort(host, strconv.Itoa(int(port))),
			"auth", kafkaAuthDescription(p.acl != nil), "tls", p.cfg.TLSMode, "reach", reach(ln.Addr()))
		return service{
			name: "kafka",
			run:  func(context.Context) error { return srv.Serve(ln) },
			stop: func(context.Context) error { return srv.Close() },
		}, nil
	}
}

// kafkaAdvertised is the host and port Metadata gives Kafka clients:
// kafkaAdvertisedListen, else brokerIP1 or the listen host (127.0.0.1 for
// all interfaces), with the listener's port (0: the one bound).
func kafkaAdvertised(advertised, brokerIP1, listen string) (string, int32, error) {
	hostPort, what := listen, "kafkaListen"
	if advertised != "" {
		hostPort, what = advertised, "kafkaAdvertisedListen"
	}
	host, port, err := net.SplitHostPort(hostPort)
	if err != nil {
		return "", 0, fmt.Errorf("%s %q: %w", what, hostPort, err)
	}
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return "", 0, fmt.Errorf("%s %q: port: %w", what, hostPort, err)
	}
	if advertised == "" {
		switch {
		case brokerIP1 != "":
			host = brokerIP1
		case host == "" || host == "0.0.0.0" || host == "::":
			host = "127.0.0.1"
		}
	}
	return host, int32(n), nil
}

func kafkaAuthDescription(acl bool) string {
	if acl {
		return "SASL PLAIN/SCRAM-SHA-256/SCRAM-SHA-512 as plain_acl.yml accounts, ACL checked"
	}
	return "none (aclEnable=false)"
}

// kafkaAccounts is the ACL as the Kafka door asks it (kafka.Accounts).
type kafkaAccounts struct{ a *acl.Authorizer }

func (k kafkaAccounts) Trusted(remote net.Addr) bool { return k.a.Trusted(remote) }
func (k kafkaAccounts) Authenticate(user, password string) bool {
	return k.a.Authenticate(user, password) != nil
}
func (k kafkaAccounts) Secret(user string) (string, bool) {
	if acct := k.a.Account(user); acct != nil {
		return acct.SecretKey(), true
	}
	return "", false
}
func (k kafkaAccounts) Admin(user string) bool {
	acct := k.a.Account(user)
	return acct != nil && acct.Admin
}
func (k kafkaAccounts) MayTopic(user, topic string, need kafka.Perm) bool {
	acct := k.a.Account(user)
	return acct != nil && acct.MayTopic(topic, aclPerm(need))
}
func (k kafkaAccounts) MayGroup(user, group string, need kafka.Perm) bool {
	acct := k.a.Account(user)
	return acct != nil && acct.MayGroup(group, aclPerm(need))
}

func aclPerm(p kafka.Perm) acl.Perm {
	switch p {
	case kafka.PermPub:
		return acl.Pub
	case kafka.PermSub:
		return acl.Sub
	}
	return acl.Any
}
