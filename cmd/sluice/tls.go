package main

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"time"
)

// certReloader serves the certificate, key and client CA files it was
// given, re-reading them when their contents change (checked at most once
// per checkEvery, on a handshake), so a renewed certificate takes effect
// without a restart. A file that fails to load
// keeps the previous good version in service and is logged.
type certReloader struct {
	certFile, keyFile, caFile string
	log                       *slog.Logger

	checkEvery time.Duration

	mu       sync.Mutex
	checked  time.Time
	stamp    [sha256.Size]byte // digest of the files last loaded
	cert     *tls.Certificate
	clientCA *x509.CertPool
}

func newCertReloader(certFile, keyFile, caFile string, log *slog.Logger) (*certReloader, error) {
	if certFile == "" || keyFile == "" {
		return nil, errors.New("TLS needs both -tls-cert and -tls-key")
	}
	c := &certReloader{certFile: certFile, keyFile: keyFile, caFile: caFile, log: log, checkEvery: time.Second}
	stamp, err := c.fileStamp()
	if err != nil {
		return nil, err
	}
	if err := c.load(stamp); err != nil {
		return nil, err
	}
	return c, nil
}

// fileStamp identifies the current version of the files by a digest of
// their contents.
func (c *certReloader) fileStamp() ([sha256.Size]byte, error) {
	h := sha256.New()
	for _, f := range []string{c.certFile, c.keyFile, c.caFile} {
		if f == "" {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			return [sha256.Size]byte{}, err
		}
		fmt.Fprintf(h, "%d:", len(b))
		h.Write(b)
	}
	return [sha256.Size]byte(h.Sum(nil)), nil
}

// load reads the files; c.mu is held or c is not yet shared.
func (c *certReloader) load(stamp [sha256.Size]byte) error {
	cert, err := tls.LoadX509KeyPair(c.certFile, c.keyFile)
	if err != nil {
		return fmt.Errorf("TLS certificate: %w", err)
	}
	var pool *x509.CertPool
	if c.caFile != "" {
		pem, err := os.ReadFile(c.caFile)
		if err != nil {
			return fmt.Errorf("TLS client CA: %w", err)
		}
		pool = x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return fmt.Errorf("TLS client CA %s: no PEM certificate", c.caFile)
		}
	}
	c.cert, c.clientCA, c.stamp = &cert, pool, stamp
	return nil
}

// current returns the certificate and CA pool, reloading changed files.
func (c *certReloader) current() (*tls.Certificate, *x509.CertPool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if now := time.Now(); now.Sub(c.checked) >= c.checkEvery {
		c.checked = now
		stamp, err := c.fileStamp()
		if err == nil && stamp != c.stamp {
			err = c.load(stamp)
			if err == nil {
				c.log.Info("TLS files reloaded", "cert", c.certFile)
			}
		}
		if err != nil {
			c.log.Warn("TLS files not reloaded; keeping the previous ones", "error", err)
		}
	}
	return c.cert, c.clientCA
}

// config returns a server tls.Config whose every handshake uses the
// current files, offering nextProtos through ALPN.
func (c *certReloader) config(nextProtos ...string) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: nextProtos,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			cert, pool := c.current()
			cfg := &tls.Config{
				MinVersion:   tls.VersionTLS12,
				NextProtos:   nextProtos,
				Certificates: []tls.Certificate{*cert},
			}
			if pool != nil {
				cfg.ClientCAs = pool
				cfg.ClientAuth = tls.RequireAndVerifyClientCert
			}
			return cfg, nil
		},
	}
}

// tlsListener wraps ln to serve TLS with cfg.
func tlsListener(ln net.Listener, cfg *tls.Config) net.Listener { return tls.NewListener(ln, cfg) }
