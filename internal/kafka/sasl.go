package kafka

// SASL: with Keel's access control on (Config.ACL, aclEnable=true) a
// connection must authenticate before any request but ApiVersions,
// SaslHandshake and SaslAuthenticate, unless it comes from an address in
// globalWhiteRemoteAddresses; a request before that closes the
// connection, as Kafka's SASL listeners do. The accounts are those of
// plain_acl.yml: the SASL username is the accessKey, the password the
// secretKey (an account's whiteRemoteAddress does not waive the password
// here). Mechanisms:
//
//	PLAIN          RFC 4616; the secret compared in constant time
//	SCRAM-SHA-256  RFC 5802/7677 over the account's secret: 4096
//	SCRAM-SHA-512  iterations, a salt per account derived from a key
//	               drawn at start (so it changes with each start, which
//	               clients do not mind: they salt per exchange), no
//	               channel binding
//
// SaslHandshake v1 then SaslAuthenticate carry the tokens in Kafka frames
// (franz-go, librdkafka, kafka-go, sarama with Net.SASL.Version=1);
// SaslHandshake v0 is followed by raw size-prefixed tokens (older sarama).
// A failure answers SASL_AUTHENTICATION_FAILED (58) and closes the
// connection. Sessions do not expire (SessionLifetimeMillis 0). Without
// access control the SASL keys are not advertised and a SaslHandshake is
// answered UNSUPPORTED_SASL_MECHANISM with no mechanism.

import (
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"errors"
	"hash"
	"net"
	"strconv"
	"strings"
	"sync"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// Accounts is Keel's access control as the Kafka door needs it
// (cmd/keel adapts internal/acl's Authorizer, plain_acl.yml, to it). Its
// methods are called per request, so a reload of the rules applies at
// once; they must be safe for concurrent use.
type Accounts interface {
	// Trusted reports whether connections from remote need no
	// credentials (globalWhiteRemoteAddresses).
	Trusted(remote net.Addr) bool
	// Authenticate reports whether password is user's (constant time).
	Authenticate(user, password string) bool
	// Secret returns user's password (SCRAM derives its keys from it);
	// ok false for an unknown user.
	Secret(user string) (secret string, ok bool)
	// Admin reports whether user may use the admin APIs.
	Admin(user string) bool
	// MayTopic and MayGroup report whether user holds need on the topic
	// or group.
	MayTopic(user, topic string, need Perm) bool
	MayGroup(user, group string, need Perm) bool
}

// Perm is what a request needs on a topic or group.
type Perm uint8

const (
	PermPub Perm = 1 << iota // write (RocketMQ's PUB)
	PermSub                  // read (SUB)
	PermAny                  // see: PUB or SUB
)

const (
	errUnsupportedSASLMechanism int16 = 33
	errIllegalSASLState         int16 = 34
	errSASLAuthenticationFailed int16 = 58
	errGroupAuthorization       int16 = 30
	errClusterAuthorization     int16 = 31

	scramIterations = 4096
)

var saslMechanisms = []string{"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"}

// connAuth is one connection's authentication state.
type connAuth struct {
	user    string // the authenticated accessKey ("": none yet)
	trusted bool   // access control off, or a globally white-listed address
	mech    string // chosen by SaslHandshake
	raw     bool   // SaslHandshake v0: the next frames are raw tokens
	scram   *scramExchange
}

func (a *connAuth) authenticated() bool { return a.trusted || a.user != "" }

func (s *Server) saslHandshake(a *connAuth, req *kmsg.SASLHandshakeRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.SASLHandshakeResponse)
	if s.cfg.ACL == nil {
		resp.ErrorCode, resp.SupportedMechanisms = errUnsupportedSASLMechanism, []string{}
		return resp
	}
	resp.SupportedMechanisms = saslMechanisms
	switch {
	case a.user != "" || a.mech != "":
		resp.ErrorCode = errIllegalSASLState
	case !containsString(saslMechanisms, req.Mechanism):
		resp.ErrorCode = errUnsupportedSASLMechanism
	default:
		a.mech, a.raw = req.Mechanism, req.Version == 0
	}
	return resp
}

func containsString(ss []string, s string) bool {
	for _, v := range ss {
		if v == s {
			return true
		}
	}
	return false
}

func (s *Server) saslAuthenticate(a *connAuth, req *kmsg.SASLAuthenticateRequest) (kmsg.Response, bool) {
	resp := req.ResponseKind().(*kmsg.SASLAuthenticateResponse)
	if s.cfg.ACL == nil || a.mech == "" || a.raw || a.user != "" {
		resp.ErrorCode, resp.ErrorMessage = errIllegalSASLState, kmsg.StringPtr("SaslAuthenticate without a SaslHandshake v1 choosing a mechanism")
		return resp, false
	}
	out, err := s.saslStep(a, req.SASLAuthBytes)
	if err != nil {
		resp.ErrorCode, resp.ErrorMessage = errSASLAuthenticationFailed, kmsg.StringPtr(err.Error())
		return resp, false
	}
	resp.SASLAuthBytes = out
	return resp, true
}

// errAuthFailed is what a client is told about any bad credentials.
var errAuthFailed = errors.New("authentication failed: unknown user or wrong password")

// saslStep feeds one client token to the chosen mechanism and returns
// the server's token.
func (s *Server) saslStep(a *connAuth, token []byte) ([]byte, error) {
	switch a.mech {
	case "PLAIN":
		// [authzid] NUL authcid NUL passwd
		parts := strings.Split(string(token), "\x00")
		if len(parts) != 3 || parts[1] == "" || parts[0] != "" && parts[0] != parts[1] {
			return nil, errors.New("malformed PLAIN token")
		}
		if !s.cfg.ACL.Authenticate(parts[1], parts[2]) {
			return nil, errAuthFailed
		}
		a.user = parts[1]
		return []byte{}, nil
	case "SCRAM-SHA-256", "SCRAM-SHA-512":
		if a.scram == nil {
			x, out, err := s.scram.first(a.mech, token, s.cfg.ACL)
			if err != nil {
				return nil, err
			}
			a.scram = x
			return out, nil
		}
		out, user, err := a.scram.final(token)
		a.scram = nil
		if err != nil {
			return nil, err
		}
		a.user = user
		return out, nil
	}
	return nil, errors.New("no SASL mechanism chosen")
}

// scramKeys derives and caches the SCRAM keys of each account.
type scramKeys struct {
	saltKey []byte
	mu      sync.Mutex
	m       map[string]scramCred // mech + "\x00" + user
}

type scramCred struct {
	secretSum            [32]byte // of the secret the keys were derived from
	salt                 []byte
	storedKey, serverKey []byte
}

func newScramKeys() *scramKeys {
	k := make([]byte, 32)
	rand.Read(k)
	return &scramKeys{saltKey: k, m: map[string]scramCred{}}
}

func scramHash(mech string) func() hash.Hash {
	if mech == "SCRAM-SHA-512" {
		return sha512.New
	}
	return sha256.New
}

func hmacOf(h func() hash.Hash, key, msg []byte) []byte {
	m := hmac.New(h, key)
	m.Write(msg)
	return m.Sum(nil)
}

// salt is the account's salt for mech (also for an unknown user, so the
// exchange does not tell whether the user exists).
func (k *scramKeys) salt(mech, user string) []byte {
	return hmacOf(sha256.New, k.saltKey, []byte(mech+"\x00"+user))[:16]
}

// cred returns the keys of user's secret for mech.
func (k *scramKeys) cred(mech, user, secret string) (scramCred, error) {
	sum := sha256.Sum256([]byte(secret))
	key := mech + "\x00" + user
	k.mu.Lock()
	c, ok := k.m[key]
	k.mu.Unlock()
	if ok && c.secretSum == sum {
		return c, nil
	}
	h := scramHash(mech)
	salt := k.salt(mech, user)
	salted, err := pbkdf2.Key(h, secret, salt, scramIterations, h().Size())
	if err != nil {
		return scramCred{}, err
	}
	clientKey := hmacOf(h, salted, []byte("Client Key"))
	hh := h()
	hh.Write(clientKey)
	c = scramCred{secretSum: sum, salt: salt, storedKey: hh.Sum(nil), serverKey: hmacOf(h, salted, []byte("Server Key"))}
	k.mu.Lock()
	if len(k.m) > 4096 {
		clear(k.m)
	}
	k.m[key] = c
	k.mu.Unlock()
	return c, nil
}

// scramExchange is a SCRAM exchange after the client's first message.
type scramExchange struct {
	mech, user      string
	known           bool
	cred            scramCred
	gs2             string // the client's GS2 header, echoed in c=
	clientFirstBare string
	serverFirst     string
	nonce           string
}

func (k *scramKeys) first(mech string, token []byte, a Accounts) (*scramExchange, []byte, error) {
	msg := string(token)
	// gs2-header: ("n" | "y") "," [ "a=" authzid ] ","
	if !strings.HasPrefix(msg, "n,") && !strings.HasPrefix(msg, "y,") {
		return nil, nil, errors.New("SCRAM: channel binding is not supported")
	}
	i := strings.IndexByte(msg[2:], ',')
	if i < 0 {
		return nil, nil, errors.New("SCRAM: malformed client-first-message")
	}
	authzid := msg[2 : 2+i]
	x := &scramExchange{mech: mech, gs2: msg[:3+i], clientFirstBare: msg[3+i:]}
	var cnonce string
	for _, attr := range strings.Split(x.clientFirstBare, ",") {
		switch {
		case strings.HasPrefix(attr, "n="):
			x.user = strings.NewReplacer("=2C", ",", "=3D", "=").Replace(attr[2:])
		case strings.HasPrefix(attr, "r="):
			cnonce = attr[2:]
		case strings.HasPrefix(attr, "m="):
			return nil, nil, errors.New("SCRAM: mandatory extensions are not supported")
		}
	}
	if x.user == "" || cnonce == "" {
		return nil, nil, errors.New("SCRAM: client-first-message without a user or a nonce")
	}
	if authzid != "" && authzid != "a="+x.user {
		return nil, nil, errors.New("SCRAM: the authorization id must be the user")
	}
	var b [18]byte
	rand.Read(b[:])
	x.nonce = cnonce + base64.RawURLEncoding.EncodeToString(b[:])
	salt := k.salt(mech, x.user)
	if secret, ok := a.Secret(x.user); ok {
		c, err := k.cred(mech, x.user, secret)
		if err != nil {
			return nil, nil, err
		}
		x.cred, x.known, salt = c, true, c.salt
	}
	x.serverFirst = "r=" + x.nonce + ",s=" + base64.StdEncoding.EncodeToString(salt) + ",i=" + strconv.Itoa(scramIterations)
	return x, []byte(x.serverFirst), nil
}

// final checks the client's proof and returns the server's final message
// and the authenticated user.
func (x *scramExchange) final(token []byte) ([]byte, string, error) {
	msg := string(token)
	i := strings.LastIndex(msg, ",p=")
	if i < 0 {
		return nil, "", errors.New("SCRAM: client-final-message without a proof")
	}
	withoutProof, proofB64 := msg[:i], msg[i+3:]
	var cb, nonce string
	for _, attr := range strings.Split(withoutProof, ",") {
		switch {
		case strings.HasPrefix(attr, "c="):
			cb = attr[2:]
		case strings.HasPrefix(attr, "r="):
			nonce = attr[2:]
		}
	}
	// The nonce must end with the server's (client's + server's part), as
	// Kafka checks: librdkafka sends its own nonce again in front of it.
	if cb != base64.StdEncoding.EncodeToString([]byte(x.gs2)) || !strings.HasSuffix(nonce, x.nonce) {
		return nil, "", errors.New("SCRAM: channel binding or nonce mismatch")
	}
	proof, err := base64.StdEncoding.DecodeString(proofB64)
	h := scramHash(x.mech)
	if err != nil || len(proof) != h().Size() || !x.known {
		return nil, "", errAuthFailed
	}
	authMessage := []byte(x.clientFirstBare + "," + x.serverFirst + "," + withoutProof)
	sig := hmacOf(h, x.cred.storedKey, authMessage)
	clientKey := make([]byte, len(proof))
	for j := range proof {
		clientKey[j] = proof[j] ^ sig[j]
	}
	hh := h()
	hh.Write(clientKey)
	if !hmac.Equal(hh.Sum(nil), x.cred.storedKey) {
		return nil, "", errAuthFailed
	}
	serverSig := hmacOf(h, x.cred.serverKey, authMessage)
	return []byte("v=" + base64.StdEncoding.EncodeToString(serverSig)), x.user, nil
}
