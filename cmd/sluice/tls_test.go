package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// testCA issues certificates for the TLS tests.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "sluice test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue returns a PEM certificate and key for cn, valid for 127.0.0.1.
func (ca *testCA) issue(t *testing.T, cn string, serial int64, usage x509.ExtKeyUsage) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb})
}

func writeFile(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestMutualTLSAndCertificateReload(t *testing.T) {
	ca := newTestCA(t)
	dir := t.TempDir()
	cfg := testConfig(t, unlimitedRules)
	cfg.tlsCert, cfg.tlsKey, cfg.tlsClientCA = filepath.Join(dir, "server.pem"), filepath.Join(dir, "server.key"), filepath.Join(dir, "ca.pem")
	certPEM, keyPEM := ca.issue(t, "server-1", 10, x509.ExtKeyUsageServerAuth)
	writeFile(t, cfg.tlsCert, certPEM)
	writeFile(t, cfg.tlsKey, keyPEM)
	writeFile(t, cfg.tlsClientCA, ca.pem)
	cfg.adminAddr = "127.0.0.1:0"
	srv := startServer(t, cfg)
	srv.certs.mu.Lock()
	srv.certs.checkEvery = 0 // check the files on every handshake
	srv.certs.mu.Unlock()

	roots := x509.NewCertPool()
	roots.AddCert(ca.cert)
	clientPEM, clientKey := ca.issue(t, "envoy", 20, x509.ExtKeyUsageClientAuth)
	clientCert, err := tls.X509KeyPair(clientPEM, clientKey)
	if err != nil {
		t.Fatal(err)
	}
	withCert := &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{clientCert}}
	withoutCert := &tls.Config{RootCAs: roots}

	// gRPC with a client certificate works; without one it fails.
	call := func(tc *tls.Config) error {
		conn, err := grpc.NewClient(srv.grpcLn.Addr().String(), grpc.WithTransportCredentials(credentials.NewTLS(tc)))
		if err != nil {
			return err
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		_, err = rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, rlsReq("internal", rd("azure", "tls")))
		return err
	}
	if err := call(withCert); err != nil {
		t.Fatalf("gRPC with a client certificate: %v", err)
	}
	if err := call(withoutCert); err == nil {
		t.Fatal("gRPC without a client certificate succeeded under mTLS")
	}

	// HTTPS /json likewise, and the served certificate is server-1.
	serverCN := func(tc *tls.Config) (string, error) {
		client := &http.Client{Transport: &http.Transport{TLSClientConfig: tc, DisableKeepAlives: true}}
		resp, err := client.Post("https://"+srv.httpLn.Addr().String()+"/json", "application/json",
			strings.NewReader(`{"domain": "internal", "descriptors": [{"entries": [{"key": "azure", "value": "tls"}]}]}`))
		if err != nil {
			return "", err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return "", &net.AddrError{Err: resp.Status}
		}
		return resp.TLS.PeerCertificates[0].Subject.CommonName, nil
	}
	if cn, err := serverCN(withCert); err != nil || cn != "server-1" {
		t.Fatalf("HTTPS: %q %v", cn, err)
	}
	if _, err := serverCN(withoutCert); err == nil {
		t.Fatal("HTTPS without a client certificate succeeded under mTLS")
	}

	// A renewed certificate is served without a restart.
	certPEM, keyPEM = ca.issue(t, "server-2", 11, x509.ExtKeyUsageServerAuth)
	writeFile(t, cfg.tlsKey, keyPEM)
	writeFile(t, cfg.tlsCert, certPEM)
	if cn, err := serverCN(withCert); err != nil || cn != "server-2" {
		t.Fatalf("after renewal: %q %v, want server-2", cn, err)
	}
	// A broken file keeps the last good certificate in service.
	writeFile(t, cfg.tlsCert, []byte("garbage"))
	if cn, err := serverCN(withCert); err != nil || cn != "server-2" {
		t.Fatalf("after a broken write: %q %v, want server-2 still", cn, err)
	}
	// The admin listener stays plain HTTP.
	resp, err := http.Get("http://" + srv.adminLn.Addr().String() + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("healthz: %d", resp.StatusCode)
	}
}
