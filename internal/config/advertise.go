package config

import (
	"errors"
	"fmt"
	"net"
)

// ErrNoAdvertiseIP is returned when no address to advertise can be found.
var ErrNoAdvertiseIP = errors.New("config: no non-loopback IPv4 address to advertise; set brokerIP1")

// AdvertiseHost chooses the host the broker registers with the NameServer
// (and clients dial): brokerIP1 if set, else the host of the listen address
// if it is a specific one, else the first non-loopback IPv4 address among
// addrs (pass net.InterfaceAddrs()).
func AdvertiseHost(brokerIP1, listenAddr string, addrs []net.Addr) (string, error) {
	if brokerIP1 != "" {
		return brokerIP1, nil
	}
	host, _, err := net.SplitHostPort(listenAddr)
	if err != nil {
		return "", fmt.Errorf("config: listen address %q: %w", listenAddr, err)
	}
	if ip := net.ParseIP(host); host != "" && (ip == nil || !ip.IsUnspecified()) {
		return host, nil
	}
	for _, a := range addrs {
		var ip net.IP
		switch v := a.(type) {
		case *net.IPNet:
			ip = v.IP
		case *net.IPAddr:
			ip = v.IP
		}
		if ip4 := ip.To4(); ip4 != nil && !ip4.IsLoopback() && !ip4.IsUnspecified() && !ip4.IsLinkLocalUnicast() {
			return ip4.String(), nil
		}
	}
	return "", ErrNoAdvertiseIP
}
