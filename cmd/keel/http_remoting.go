package main

import (
	"net"
	"sync"
)

// remotingAnswer is what the HTTP listener writes to a connection whose
// first bytes are a RocketMQ remoting frame (a tool or client pointed at
// the HTTP port): an HTTP answer at once, which the remoting client
// recognises (remoting.ErrHTTPPeer), instead of silence until a timeout.
const remotingAnswer = "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n" +
	"this is Keel's HTTP port (metrics, console), not a RocketMQ remoting port: use the NameServer's address (port 9876 by default)\n"

// remotingGuard wraps the HTTP listener so that each connection's first
// read checks for a remoting frame. A frame starts with its big-endian
// length, whose first byte is 0 for any frame under 16 MiB; an HTTP
// request starts with a method name in letters.
type remotingGuard struct{ net.Listener }

func (g remotingGuard) Accept() (net.Conn, error) {
	c, err := g.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &remotingGuardConn{Conn: c}, nil
}

type remotingGuardConn struct {
	net.Conn
	once sync.Once
}

func (c *remotingGuardConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	first := false
	c.once.Do(func() { first = true })
	if first && n > 0 && p[0] < 0x20 {
		c.Conn.Write([]byte(remotingAnswer))
		c.Conn.Close()
		return 0, net.ErrClosed
	}
	return n, err
}

// CloseWrite lets the HTTP server half-close as it does on a plain TCP
// connection (it closes the write side and drains before closing after an
// error answer, so the client reads the answer rather than a reset).
func (c *remotingGuardConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
