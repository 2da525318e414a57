package main

import (
	"context"
	"errors"
	"net"

	"github.com/keelmq/keel/internal/amqp"
)

// amqpListenFlag is where the AMQP listener's address is changed.
const amqpListenFlag = "--amqp-listen or amqpListen in broker.conf"

// listenAMQP names the AMQP listener.
const listenAMQP = "AMQP"

// amqpStarter serves AMQP 0-9-1 on addr ("" = off) over the open store.
// It stops before the store closes (starters stop in reverse): Close
// requeues unacknowledged deliveries and writes the acknowledgement state.
func (p *parts) amqpStarter(addr string) starter {
	return func() (service, error) {
		if addr == "" {
			return service{name: "amqp (off)"}, nil
		}
		srv, err := amqp.New(amqp.Config{DataDir: p.cfg.StorePathRootDir}, p.store, p.log.With("component", "amqp"))
		if err != nil {
			return service{}, err
		}
		ln, err := p.listen(listenAMQP, addr)
		if err != nil {
			srv.Close()
			return service{}, err
		}
		p.log.Info("amqp listening", "addr", ln.Addr().String())
		done := make(chan error, 1)
		go func() { done <- srv.Serve(ln) }()
		return service{
			name: "amqp",
			run: func(ctx context.Context) error {
				select {
				case <-ctx.Done():
					return nil
				case err := <-done:
					if err == nil || errors.Is(err, net.ErrClosed) {
						err = errors.New("amqp listener stopped")
					}
					return err
				}
			},
			stop: func(context.Context) error { return srv.Close() },
		}, nil
	}
}
