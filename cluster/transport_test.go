package cluster

import (
	"errors"
	"io"
	"log"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
)

// dropTransport is memberlist's NetTransport with a drop table: packets
// and streams to blocked addresses vanish, which partitions nodes when
// both sides block each other. It also records the largest packet.
type dropTransport struct {
	*memberlist.NetTransport
	mu       sync.Mutex
	blocked  map[string]bool
	maxWrite int
}

func newDropTransport() (*dropTransport, int, error) {
	nt, err := memberlist.NewNetTransport(&memberlist.NetTransportConfig{
		BindAddrs: []string{"127.0.0.1"},
		Logger:    log.New(io.Discard, "", 0),
	})
	if err != nil {
		return nil, 0, err
	}
	return &dropTransport{NetTransport: nt, blocked: map[string]bool{}}, nt.GetAutoBindPort(), nil
}

func (d *dropTransport) block(addrs ...string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, a := range addrs {
		d.blocked[a] = true
	}
}

func (d *dropTransport) heal() {
	d.mu.Lock()
	defer d.mu.Unlock()
	clear(d.blocked)
}

func (d *dropTransport) drop(addr string, size int) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.maxWrite = max(d.maxWrite, size)
	return d.blocked[addr]
}

var errBlocked = errors.New("blocked by test partition")

func (d *dropTransport) WriteTo(b []byte, addr string) (time.Time, error) {
	if d.drop(addr, len(b)) {
		return time.Now(), nil
	}
	return d.NetTransport.WriteTo(b, addr)
}

func (d *dropTransport) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	if d.drop(a.Addr, len(b)) {
		return time.Now(), nil
	}
	return d.NetTransport.WriteToAddress(b, a)
}

func (d *dropTransport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	if d.drop(addr, 0) {
		return nil, errBlocked
	}
	return d.NetTransport.DialTimeout(addr, timeout)
}

func (d *dropTransport) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	if d.drop(a.Addr, 0) {
		return nil, errBlocked
	}
	return d.NetTransport.DialAddressTimeout(a, timeout)
}

// withDropTransports gives every node of a test cluster a dropTransport,
// returned in node order.
func withDropTransports(t testing.TB, size int) ([]*dropTransport, func(i int, c *Config)) {
	ts := make([]*dropTransport, size)
	return ts, func(i int, c *Config) {
		tr, port, err := newDropTransport()
		if err != nil {
			t.Errorf("transport %d: %v", i, err)
			return
		}
		ts[i] = tr
		c.BindPort = port
		c.Memberlist.Transport = tr
	}
}
