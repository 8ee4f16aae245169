package pgstore

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// cutProxy forwards loopback TCP connections to a target until Cut, after
// which it silently drops every byte in both directions while keeping the
// connections open: a network partition, as seen by both ends, with no
// RST or FIN to tell either side.
type cutProxy struct {
	ln     net.Listener
	target string
	cut    atomic.Bool

	closeOnce sync.Once

	mu     sync.Mutex
	closed bool
	conns  []net.Conn
	wg     sync.WaitGroup
}

// startProxy listens on 127.0.0.1 and forwards to target until t ends.
func startProxy(t testing.TB, target string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, target: target}
	p.wg.Go(p.accept)
	t.Cleanup(p.close)
	return p
}

// Addr returns the proxy's host:port.
func (p *cutProxy) Addr() string { return p.ln.Addr().String() }

// Cut starts dropping all traffic.
func (p *cutProxy) Cut() { p.cut.Store(true) }

func (p *cutProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // listener closed
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			c.Close()
			s.Close()
			return
		}
		p.conns = append(p.conns, c, s)
		p.mu.Unlock()
		p.wg.Go(func() { p.pipe(s, c) })
		p.wg.Go(func() { p.pipe(c, s) })
	}
}

// pipe copies src to dst until either fails, dropping data once cut.
func (p *cutProxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !p.cut.Load() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) || p.cut.Load() {
				return
			}
			// Pass a half-close on, as a real network would.
			if tc, ok := dst.(*net.TCPConn); ok {
				_ = tc.CloseWrite()
			}
			return
		}
	}
}

// close stops accepting, closes every connection and waits for the
// goroutines. It may be called more than once.
func (p *cutProxy) close() { p.closeOnce.Do(p.shut) }

func (p *cutProxy) shut() {
	p.ln.Close()
	p.mu.Lock()
	p.closed = true
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}
