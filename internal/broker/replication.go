package broker

import (
	"github.com/keelmq/keel/internal/remoting"
)

// refuseSend answers a send the SendGate refuses, before anything is
// stored (nil: go on).
func (b *Broker) refuseSend(req *remoting.Command) *remoting.Command {
	g := b.cfg.SendGate
	if g == nil {
		return nil
	}
	res := g()
	if res.OK() {
		return nil
	}
	remark := res.Status.String()
	if res.Err != nil {
		remark += ": " + res.Err.Error()
	}
	return req.NewResponse(putStatusCode(res.Status), remark)
}

// haAddr is the address registered as haServerAddr.
func (c *Config) haAddr() string {
	if c.HAAddr != "" {
		return c.HAAddr
	}
	return c.AdvertisedAddr
}
