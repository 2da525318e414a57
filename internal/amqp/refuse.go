package amqp

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/keelmq/keel/internal/amqp/wire"
)

// ServeRefusals answers every AMQP connection on ln, until ln is closed,
// with a refusal at connection.open: the negotiation runs as on a broker
// that serves (so that a client reports the reason rather than a reset
// socket), then connection.close with NOT_ALLOWED (530) and the text
// reason returns (read for each connection: who the master is may
// change). It is what a slave's AMQP door does: it stores nothing and
// opens nothing of the broker's state, and checks no credentials (it
// grants nothing; the reason names only what the NameServer tells anyone).
// Each connection ends within handshakeTimeout, and when ln closes.
func ServeRefusals(ln net.Listener, reason func() string, log *slog.Logger) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	open := map[net.Conn]struct{}{}
	defer func() {
		// The listener closed: the refusals under way end now.
		mu.Lock()
		for nc := range open {
			nc.Close()
		}
		mu.Unlock()
		wg.Wait()
	}()
	for {
		nc, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return fmt.Errorf("amqp: accept: %w", err)
		}
		mu.Lock()
		open[nc] = struct{}{}
		mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := refuse(nc, reason()); err != nil {
				log.Debug("amqp: refusal", "remote", nc.RemoteAddr().String(), "err", err)
			}
			nc.Close()
			mu.Lock()
			delete(open, nc)
			mu.Unlock()
		}()
	}
}

// refuse negotiates up to connection.open and answers it with
// connection.close.
func refuse(nc net.Conn, reason string) error {
	nc.SetDeadline(time.Now().Add(handshakeTimeout))
	br := bufio.NewReader(nc)
	var hdr [8]byte
	if _, err := io.ReadFull(br, hdr[:]); err != nil {
		return err
	}
	if !bytes.Equal(hdr[:], wire.ProtocolHeader) {
		nc.Write(wire.ProtocolHeader)
		return fmt.Errorf("protocol header % x", hdr)
	}
	fr := wire.NewFrameReader(br)
	send := func(m wire.Method) error {
		_, err := nc.Write(wire.AppendMethodFrame(nil, 0, m))
		return err
	}
	read := func() (wire.Method, error) {
		for {
			f, err := fr.ReadFrame(wire.FrameMinSize)
			if err != nil {
				return nil, err
			}
			if f.Type == wire.FrameHeartbeat {
				continue
			}
			if f.Type != wire.FrameMethod || f.Channel != 0 {
				return nil, fmt.Errorf("frame type %d on channel %d during the handshake", f.Type, f.Channel)
			}
			return wire.ReadMethod(f.Payload)
		}
	}
	if err := send(&wire.ConnectionStart{VersionMajor: 0, VersionMinor: 9, ServerProperties: serverProperties(),
		Mechanisms: []byte("PLAIN AMQPLAIN"), Locales: []byte("en_US")}); err != nil {
		return err
	}
	if m, err := read(); err != nil {
		return err
	} else if _, ok := m.(*wire.ConnectionStartOk); !ok {
		return fmt.Errorf("expected connection.start-ok, got %s", m.Name())
	}
	if err := send(&wire.ConnectionTune{ChannelMax: 1, FrameMax: wire.FrameMinSize}); err != nil {
		return err
	}
	for {
		m, err := read()
		if err != nil {
			return err
		}
		switch m := m.(type) {
		case *wire.ConnectionTuneOk:
			continue
		case *wire.ConnectionOpen:
			class, method := m.ID()
			if err := send(&wire.ConnectionClose{ReplyCode: wire.NotAllowed, ReplyText: "NOT_ALLOWED - " + reason,
				ClassId: class, MethodId: method}); err != nil {
				return err
			}
			// The client answers close-ok; the socket ends either way.
			read()
			return nil
		default:
			return fmt.Errorf("expected connection.tune-ok or open, got %s", m.Name())
		}
	}
}
