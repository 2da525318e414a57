package replication

// Authentication and encryption of a replication link
// (docs/replication.md#protecting-the-link).
//
// Both ends are configured alike; each protection runs before any frame
// of the replication protocol (HELLO and after), so an unauthenticated
// peer never sees a CommitLog byte, an epoch history or a log end.
//
// TLS (MasterConfig.TLS, SlaveConfig.TLS): the connection is TLS from its
// first byte, TLS only. A peer that does not complete the TLS handshake
// (a plain-TCP one; one whose certificate the configuration does not
// accept) is closed.
//
// A shared secret (Secret): a challenge–response in which each side proves
// that it knows the secret over a nonce of each side, so the secret never
// crosses the wire and no recorded exchange passes again:
//
//	AUTH       S→M  u8 method (1: HMAC-SHA256) | nonce_r [32]
//	CHALLENGE  M→S  nonce_m [32]
//	PROOF      S→M  HMAC-SHA256(secret, "keel replication: replica" | b | nonce_r | nonce_m)
//	AUTH_OK    M→S  HMAC-SHA256(secret, "keel replication: master"  | b | nonce_r | nonce_m)
//
// b is the TLS session's exported keying material (RFC 5705, 32 bytes)
// when the link is TLS, else nothing: a proof made on one TLS session does
// not verify on another, so whoever relays the exchange between two TLS
// sessions fails. Without TLS the exchange authenticates both ends at the
// start, but the bytes that follow travel in clear and unprotected
// against someone on the path who can alter them. The master proves
// itself only after the replica did, so a stranger obtains no MAC of the
// secret; it answers a wrong proof with REJECT (rejectAuth). The replica
// refuses a master whose AUTH_OK does not verify, so no impostor master
// can feed it data or make it truncate.
//
// Limits before authentication: the TLS handshake and the exchange end
// within AuthTimeout or the connection is closed; the master reads frames
// of at most maxAuthFrameBytes, serves at most maxPendingAuth
// unauthenticated connections at once (more are closed at once), and logs
// refused peers at most refusalLogBurst at once, then once per
// refusalLogInterval (the next line counts the ones suppressed).

import (
	"bufio"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"
)

// Frame types of the authentication exchange.
const (
	typeAuth      byte = 0x10 // replica -> master: method and the replica's nonce
	typeChallenge byte = 0x11 // master -> replica: the master's nonce
	typeProof     byte = 0x12 // replica -> master: the replica's MAC
	typeAuthOK    byte = 0x13 // master -> replica: the master's MAC
)

// Limits and defaults of the exchange.
const (
	// DefaultAuthTimeout bounds a connection's TLS handshake and
	// authentication.
	DefaultAuthTimeout = 5 * time.Second
	// MinSecretBytes is the shortest shared secret accepted.
	MinSecretBytes = 16
	// maxAuthFrameBytes bounds what the master reads before a peer is
	// authenticated (the largest is AUTH: 1 + 32 bytes, plus the frame's
	// type and CRC).
	maxAuthFrameBytes = 64
	// maxAuthAnswerBytes bounds what a replica reads from a master that
	// has not proved itself (a REJECT's reason is at most 4096 bytes).
	maxAuthAnswerBytes = 4096 + 64
	// maxPendingAuth bounds the master's connections not yet
	// authenticated.
	maxPendingAuth = 64
	// refusalLogBurst and refusalLogInterval bound the log lines about
	// refused peers, on either side: a burst, then one per interval.
	refusalLogBurst    = 10
	refusalLogInterval = time.Second
	// authRetryInterval is how long a replica that failed to
	// authenticate waits before it dials again.
	authRetryInterval = 5 * time.Second

	nonceBytes = 32
	macBytes   = sha256.Size
	methodHMAC = 1
	// exporterLabel names the TLS keying material a proof is bound to.
	exporterLabel = "EXPORTER-keel-replication-auth"
)

// rejectAuth: the peer did not authenticate (no secret, a wrong one).
const rejectAuth byte = 4

// ErrAuth: a replication peer failed to authenticate, or refused this
// side's authentication. A replica that meets it dials again after
// authRetryInterval.
var ErrAuth = errors.New("replication: authentication failed")

var (
	labelReplica = []byte("keel replication: replica")
	labelMaster  = []byte("keel replication: master")
)

// proof is the MAC of one side (label) over both nonces and the TLS
// binding.
func proof(secret, label, binding, nonceR, nonceM []byte) []byte {
	h := hmac.New(sha256.New, secret)
	h.Write(label)
	h.Write([]byte{byte(len(binding))})
	h.Write(binding)
	h.Write(nonceR)
	h.Write(nonceM)
	return h.Sum(nil)
}

// tlsBinding is the keying material of c's TLS session, nil for a plain
// connection.
func tlsBinding(c net.Conn) ([]byte, error) {
	tc, ok := c.(*tls.Conn)
	if !ok {
		return nil, nil
	}
	cs := tc.ConnectionState()
	b, err := cs.ExportKeyingMaterial(exporterLabel, nil, 32)
	if err != nil {
		return nil, fmt.Errorf("%w: TLS keying material: %w", ErrAuth, err)
	}
	return b, nil
}

func newNonce() []byte {
	b := make([]byte, nonceBytes)
	rand.Read(b) // never fails (crypto/rand)
	return b
}

func writeFrame(c net.Conn, typ byte, payload []byte) error {
	_, err := c.Write(appendFrame(nil, typ, payload))
	return err
}

// refusals rate-limits the log lines about refused peers: a burst of
// refusalLogBurst lines, then one per refusalLogInterval, so that a few
// misconfigured replicas are always logged and a flood is not.
type refusals struct {
	log *slog.Logger

	mu         sync.Mutex
	tokens     float64
	last       time.Time
	suppressed int
}

// warn logs msg if the budget allows, else counts it in the next line's
// "suppressed".
func (l *refusals) warn(msg string, args ...any) {
	l.mu.Lock()
	now := time.Now()
	if l.last.IsZero() {
		l.tokens = refusalLogBurst
	} else {
		l.tokens = min(refusalLogBurst, l.tokens+float64(now.Sub(l.last))/float64(refusalLogInterval))
	}
	l.last = now
	if l.tokens < 1 {
		l.suppressed++
		l.mu.Unlock()
		return
	}
	l.tokens--
	n := l.suppressed
	l.suppressed = 0
	l.mu.Unlock()
	if n > 0 {
		args = append(args, "suppressed", n)
	}
	l.log.Warn(msg, args...)
}

// admit runs the master's side of the protections on a new connection:
// TLS, then the challenge when a secret is set. It returns the connection
// to speak on and its reader, or an error (the peer was refused: logged
// here, with the reason).
func (m *Master) admit(raw net.Conn) (net.Conn, *bufio.Reader, error) {
	raw.SetDeadline(time.Now().Add(m.cfg.AuthTimeout))
	c := raw
	if m.cfg.TLS != nil {
		tc := tls.Server(raw, m.cfg.TLS)
		if err := tc.Handshake(); err != nil {
			m.refused.warn("replication: refused a connection: TLS handshake failed (a plain-TCP peer, or a certificate this master does not accept); it got nothing",
				"remote", raw.RemoteAddr().String(), "err", err)
			return nil, nil, fmt.Errorf("%w: TLS handshake: %w", ErrAuth, err)
		}
		c = tc
	}
	r := bufio.NewReaderSize(c, 64<<10)
	if len(m.cfg.Secret) > 0 {
		if err := m.challenge(c, r); err != nil {
			m.refused.warn("replication: refused a connection that did not authenticate (haAuthSecret); it got nothing",
				"remote", raw.RemoteAddr().String(), "err", err)
			return nil, nil, err
		}
	}
	raw.SetDeadline(time.Time{})
	return c, r, nil
}

// challenge authenticates a replica that must know the secret.
func (m *Master) challenge(c net.Conn, r *bufio.Reader) error {
	if h, err := r.Peek(5); err == nil && h[4] == typeHello {
		m.reject(c, rejectAuth, "this master requires authentication: set haAuthSecret (or haAuthSecretFile) on the replica to the master's")
		return fmt.Errorf("%w: the peer sent HELLO without authenticating (no haAuthSecret?)", ErrAuth)
	}
	typ, p, _, err := readFrame(r, maxAuthFrameBytes, nil)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrAuth, err)
	}
	if typ != typeAuth || len(p) != 1+nonceBytes || p[0] != methodHMAC {
		return fmt.Errorf("%w: frame type %d of %d bytes where AUTH (HMAC-SHA256) was expected", ErrAuth, typ, len(p))
	}
	nonceR := append([]byte(nil), p[1:]...)
	nonceM := newNonce()
	if err := writeFrame(c, typeChallenge, nonceM); err != nil {
		return fmt.Errorf("%w: %w", ErrAuth, err)
	}
	typ, p, _, err = readFrame(r, maxAuthFrameBytes, nil)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrAuth, err)
	}
	if typ != typeProof || len(p) != macBytes {
		return fmt.Errorf("%w: frame type %d of %d bytes where PROOF was expected", ErrAuth, typ, len(p))
	}
	binding, err := tlsBinding(c)
	if err != nil {
		return err
	}
	if !hmac.Equal(p, proof(m.cfg.Secret, labelReplica, binding, nonceR, nonceM)) {
		m.reject(c, rejectAuth, "authentication failed: the replica's haAuthSecret is not the master's")
		return fmt.Errorf("%w: wrong proof (the peer's haAuthSecret is not this master's)", ErrAuth)
	}
	if err := writeFrame(c, typeAuthOK, proof(m.cfg.Secret, labelMaster, binding, nonceR, nonceM)); err != nil {
		return fmt.Errorf("%w: %w", ErrAuth, err)
	}
	return nil
}

// secure runs the replica's side of the protections on a connection to
// its master: TLS, then the challenge when a secret is set.
func (s *Slave) secure(raw net.Conn) (net.Conn, *bufio.Reader, error) {
	raw.SetDeadline(time.Now().Add(s.cfg.AuthTimeout))
	c := raw
	if s.cfg.TLS != nil {
		tc := tls.Client(raw, s.cfg.TLS)
		if err := tc.Handshake(); err != nil {
			return nil, nil, fmt.Errorf("%w: TLS handshake with the master (does it run tlsMode, and accept this certificate?): %w", ErrAuth, err)
		}
		c = tc
	}
	r := bufio.NewReaderSize(c, 256<<10)
	if len(s.cfg.Secret) > 0 {
		if err := s.authenticate(c, r); err != nil {
			return nil, nil, err
		}
	}
	raw.SetDeadline(time.Time{})
	return c, r, nil
}

// authenticate proves the secret to the master and checks the master's
// proof.
func (s *Slave) authenticate(c net.Conn, r *bufio.Reader) error {
	nonceR := newNonce()
	if err := writeFrame(c, typeAuth, append([]byte{methodHMAC}, nonceR...)); err != nil {
		return fmt.Errorf("%w: %w", ErrAuth, err)
	}
	p, err := s.authAnswer(r, typeChallenge, nonceBytes)
	if err != nil {
		return err
	}
	nonceM := append([]byte(nil), p...)
	binding, err := tlsBinding(c)
	if err != nil {
		return err
	}
	if err := writeFrame(c, typeProof, proof(s.cfg.Secret, labelReplica, binding, nonceR, nonceM)); err != nil {
		return fmt.Errorf("%w: %w", ErrAuth, err)
	}
	p, err = s.authAnswer(r, typeAuthOK, macBytes)
	if err != nil {
		return err
	}
	if !hmac.Equal(p, proof(s.cfg.Secret, labelMaster, binding, nonceR, nonceM)) {
		return fmt.Errorf("%w: the master's proof does not verify: it does not know haAuthSecret (not this group's master?)", ErrAuth)
	}
	return nil
}

// authAnswer reads the master's next frame of the exchange: want with a
// payload of n bytes, or a REJECT.
func (s *Slave) authAnswer(r *bufio.Reader, want byte, n int) ([]byte, error) {
	typ, p, _, err := readFrame(r, maxAuthAnswerBytes, nil)
	switch {
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		return nil, fmt.Errorf("%w: the master closed the connection during authentication (an older master, or one without haAuthSecret?): %w", ErrAuth, err)
	case err != nil:
		return nil, fmt.Errorf("%w: %w", ErrAuth, err)
	case typ == typeReject:
		_, reason, err := decodeReject(p)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrAuth, err)
		}
		return nil, fmt.Errorf("%w: the master refused: %s", ErrAuth, reason)
	case typ != want || len(p) != n:
		return nil, fmt.Errorf("%w: the master answered frame type %d of %d bytes during authentication", ErrAuth, typ, len(p))
	}
	return p, nil
}
