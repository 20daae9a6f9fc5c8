package opshttp_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/opshttp"
	"github.com/sluicehq/sluice/internal/testkit"
)

// guarded is a server with a write route and a read route that count
// the requests reaching them, listening on l.
type guarded struct {
	addr          string
	writes, reads atomic.Int32
	logs          *testkit.Buffer
	client        *http.Client
	scheme        string
}

func startGuarded(t *testing.T, l opshttp.Listen) *guarded {
	t.Helper()
	g := &guarded{logs: &testkit.Buffer{}, client: http.DefaultClient, scheme: "http"}
	s := opshttp.New(prometheus.NewRegistry(), slog.New(slog.NewJSONHandler(g.logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	s.AddReadiness("ok", func() bool { return true })
	s.Handle("POST /api/v1/things", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		g.writes.Add(1)
		w.WriteHeader(http.StatusAccepted)
	}))
	s.Handle("GET /api/v1/things", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		g.reads.Add(1)
		io.WriteString(w, "[]")
	}))
	ctx, cancel := context.WithCancel(context.Background())
	addr, errc, err := s.ListenAndServe(ctx, l)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		if err := <-errc; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	g.addr = addr.String()
	return g
}

// call sends method path to the server with the Host header host (the
// bound address when empty) and headers; it returns the status and body.
func (g *guarded) call(t *testing.T, method, path, host string, headers map[string]string, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, g.scheme+"://"+g.addr+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := g.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

const testToken = "tok-3f1e9a77c2d84b06"

// Every write needs the bearer token, a JSON body, no foreign origin and a
// Host naming the server; a refused request never reaches the route and
// the token is neither echoed nor logged. /metrics, /healthz and /readyz
// answer anyone.
func TestWriteRoutesRefusals(t *testing.T) {
	t.Parallel()
	g := startGuarded(t, opshttp.Listen{Addr: "127.0.0.1:0", Token: testToken})
	_, port, _ := net.SplitHostPort(g.addr)
	auth := "Bearer " + testToken
	const wrong = "Bearer tok-wrong-0000000000"
	for _, tc := range []struct {
		name    string
		host    string
		headers map[string]string
		want    int
	}{
		{"no token", "", map[string]string{"Content-Type": "application/json"}, http.StatusUnauthorized},
		{"wrong token", "", map[string]string{"Authorization": wrong, "Content-Type": "application/json"}, http.StatusUnauthorized},
		{"token as basic auth", "", map[string]string{"Authorization": "Basic " + testToken, "Content-Type": "application/json"}, http.StatusUnauthorized},
		{"token prefix", "", map[string]string{"Authorization": auth[:len(auth)-1], "Content-Type": "application/json"}, http.StatusUnauthorized},
		{"text/plain", "", map[string]string{"Authorization": auth, "Content-Type": "text/plain"}, http.StatusUnsupportedMediaType},
		{"form", "", map[string]string{"Authorization": auth, "Content-Type": "application/x-www-form-urlencoded"}, http.StatusUnsupportedMediaType},
		{"no content type", "", map[string]string{"Authorization": auth}, http.StatusUnsupportedMediaType},
		{"foreign origin", "", map[string]string{"Authorization": auth, "Content-Type": "application/json", "Origin": "http://evil.example"}, http.StatusForbidden},
		{"other port on the same host", "", map[string]string{"Authorization": auth, "Content-Type": "application/json", "Origin": "http://127.0.0.1:1"}, http.StatusForbidden},
		{"null origin", "", map[string]string{"Authorization": auth, "Content-Type": "application/json", "Origin": "null"}, http.StatusForbidden},
		{"cross-site fetch", "", map[string]string{"Authorization": auth, "Content-Type": "application/json", "Sec-Fetch-Site": "cross-site"}, http.StatusForbidden},
		{"foreign host", "evil.example:" + port, map[string]string{"Authorization": auth, "Content-Type": "application/json"}, http.StatusMisdirectedRequest},
		{"foreign host without origin check", "rebind.evil.example", map[string]string{"Authorization": auth, "Content-Type": "application/json", "Origin": "http://rebind.evil.example"}, http.StatusMisdirectedRequest},
		{"allowed", "", map[string]string{"Authorization": auth, "Content-Type": "application/json"}, http.StatusAccepted},
		{"allowed with charset and same origin", "", map[string]string{"Authorization": "bearer " + testToken, "Content-Type": "application/json; charset=utf-8", "Origin": "http://" + g.addr, "Sec-Fetch-Site": "same-origin"}, http.StatusAccepted},
		{"allowed as localhost", "localhost:" + port, map[string]string{"Authorization": auth, "Content-Type": "application/json"}, http.StatusAccepted},
	} {
		code, body := g.call(t, http.MethodPost, "/api/v1/things", tc.host, tc.headers, `{}`)
		if code != tc.want {
			t.Errorf("%s: %d %s, want %d", tc.name, code, body, tc.want)
		}
		if strings.Contains(body, testToken) || strings.Contains(body, "tok-wrong") {
			t.Errorf("%s: the answer echoes a token: %s", tc.name, body)
		}
	}
	if n := g.writes.Load(); n != 3 {
		t.Errorf("the write route ran %d times, want 3 (the allowed requests only)", n)
	}
	// Reads need no token, but a Host naming the server.
	if code, body := g.call(t, http.MethodGet, "/api/v1/things", "", nil, ""); code != 200 || body != "[]" {
		t.Errorf("GET route: %d %q", code, body)
	}
	if code, _ := g.call(t, http.MethodGet, "/api/v1/things", "evil.example:"+port, nil, ""); code != http.StatusMisdirectedRequest {
		t.Errorf("GET route with a foreign Host: %d, want 421", code)
	}
	if n := g.reads.Load(); n != 1 {
		t.Errorf("the read route ran %d times, want 1", n)
	}
	for _, p := range []string{"/metrics", "/healthz", "/readyz"} {
		if code, _ := g.call(t, http.MethodGet, p, "evil.example", nil, ""); code != 200 {
			t.Errorf("GET %s with a foreign Host and no token: %d, want 200", p, code)
		}
	}
	logs := g.logs.String()
	if strings.Contains(logs, testToken) || strings.Contains(logs, "tok-wrong") {
		t.Errorf("a token is in the logs:\n%s", logs)
	}
	if !strings.Contains(logs, `"rule":"token"`) || !strings.Contains(logs, `"rule":"host"`) {
		t.Errorf("refusals are not logged with their rule:\n%s", logs)
	}
}

// Without a token a loopback server still refuses foreign origins, foreign
// Host names and non-JSON writes (a browser form post to localhost).
func TestLoopbackWithoutToken(t *testing.T) {
	t.Parallel()
	g := startGuarded(t, opshttp.Listen{Addr: "127.0.0.1:0"})
	json := map[string]string{"Content-Type": "application/json"}
	if code, _ := g.call(t, http.MethodPost, "/api/v1/things", "", json, `{}`); code != http.StatusAccepted {
		t.Errorf("write without a token configured: %d, want 202", code)
	}
	if code, _ := g.call(t, http.MethodPost, "/api/v1/things", "", map[string]string{"Content-Type": "text/plain"}, `{}`); code != http.StatusUnsupportedMediaType {
		t.Errorf("text/plain: %d, want 415", code)
	}
	if code, _ := g.call(t, http.MethodPost, "/api/v1/things", "", map[string]string{"Content-Type": "application/json", "Origin": "https://evil.example"}, `{}`); code != http.StatusForbidden {
		t.Errorf("foreign origin: %d, want 403", code)
	}
	if code, _ := g.call(t, http.MethodPost, "/api/v1/things", "attacker.example", json, `{}`); code != http.StatusMisdirectedRequest {
		t.Errorf("foreign host: %d, want 421", code)
	}
	if n := g.writes.Load(); n != 1 {
		t.Errorf("the write route ran %d times, want 1", n)
	}
}

// A server on every interface answers to any IP literal (a DNS rebinding
// attack sends a name) and to the configured names.
func TestAnyInterfaceHosts(t *testing.T) {
	t.Parallel()
	g := startGuarded(t, opshttp.Listen{Addr: "0.0.0.0:0", Token: testToken, Hosts: []string{"Sluice-Ticks.sluice.svc"}})
	_, port, _ := net.SplitHostPort(g.addr)
	g.addr = net.JoinHostPort("127.0.0.1", port)
	h := map[string]string{"Authorization": "Bearer " + testToken, "Content-Type": "application/json"}
	for host, want := range map[string]int{
		"10.1.2.3:9464":                 http.StatusAccepted,
		"[fd00::5]:9464":                http.StatusAccepted,
		"sluice-ticks.sluice.svc":       http.StatusAccepted,
		"sluice-ticks.sluice.svc.:9464": http.StatusAccepted,
		"localhost":                     http.StatusAccepted,
		"sluice-ticks.evil.example":     http.StatusMisdirectedRequest,
		"10.1.2.3.nip.io":               http.StatusMisdirectedRequest,
	} {
		if code, body := g.call(t, http.MethodPost, "/api/v1/things", host, h, `{}`); code != want {
			t.Errorf("Host %s: %d %s, want %d", host, code, body, want)
		}
	}
}

// A non-loopback address without a token is refused before anything is
// bound, unless the open API is asked for; loopback addresses need none.
func TestNonLoopbackNeedsToken(t *testing.T) {
	t.Parallel()
	for _, addr := range []string{"0.0.0.0:0", ":0", "[::]:0", "10.0.0.5:9464", "ops.example:9464"} {
		err := opshttp.Listen{Addr: addr}.Check()
		if !errors.Is(err, opshttp.ErrUnauthenticated) {
			t.Errorf("Check(%s) = %v, want ErrUnauthenticated", addr, err)
		}
		if err := (opshttp.Listen{Addr: addr, Token: testToken}).Check(); err != nil {
			t.Errorf("Check(%s) with a token = %v", addr, err)
		}
		if err := (opshttp.Listen{Addr: addr, Open: true}).Check(); err != nil {
			t.Errorf("Check(%s) open = %v", addr, err)
		}
	}
	for _, addr := range []string{"127.0.0.1:0", "localhost:9464", "[::1]:0", "127.0.0.2:0"} {
		if err := (opshttp.Listen{Addr: addr}).Check(); err != nil {
			t.Errorf("Check(%s) = %v, want nil on loopback", addr, err)
		}
	}
	s := opshttp.New(prometheus.NewRegistry(), nil)
	if _, _, err := s.ListenAndServe(context.Background(), opshttp.Listen{Addr: "0.0.0.0:0"}); !errors.Is(err, opshttp.ErrUnauthenticated) {
		t.Fatalf("ListenAndServe on every interface without a token = %v", err)
	}
	if err := (opshttp.Listen{Addr: "127.0.0.1:0", CertFile: "c.pem"}).Check(); err == nil {
		t.Error("a certificate without its key passed Check")
	}
}

// With a certificate the server speaks HTTPS only, and the same-origin
// rule expects https origins.
func TestTLS(t *testing.T) {
	t.Parallel()
	certFile, keyFile, pool := selfSigned(t)
	g := startGuarded(t, opshttp.Listen{Addr: "127.0.0.1:0", Token: testToken, CertFile: certFile, KeyFile: keyFile})
	plain := &guarded{addr: g.addr, client: http.DefaultClient, scheme: "http"}
	if code, _ := plain.call(t, http.MethodGet, "/healthz", "", nil, ""); code != http.StatusBadRequest {
		t.Errorf("plain HTTP to the TLS server: %d, want 400", code)
	}
	g.scheme = "https"
	g.client = &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	if code, body := g.call(t, http.MethodGet, "/healthz", "", nil, ""); code != 200 || strings.TrimSpace(body) != "ok" {
		t.Errorf("GET /healthz over TLS: %d %q", code, body)
	}
	h := map[string]string{"Authorization": "Bearer " + testToken, "Content-Type": "application/json", "Origin": "https://" + g.addr}
	if code, _ := g.call(t, http.MethodPost, "/api/v1/things", "", h, `{}`); code != http.StatusAccepted {
		t.Errorf("same-origin https write: %d, want 202", code)
	}
	h["Origin"] = "http://" + g.addr
	if code, _ := g.call(t, http.MethodPost, "/api/v1/things", "", h, `{}`); code != http.StatusForbidden {
		t.Errorf("http origin to the https server: %d, want 403", code)
	}
	s := opshttp.New(prometheus.NewRegistry(), nil)
	if _, _, err := s.ListenAndServe(context.Background(), opshttp.Listen{Addr: "127.0.0.1:0", CertFile: keyFile, KeyFile: certFile}); err == nil {
		t.Error("swapped certificate and key files were accepted")
	}
}

// selfSigned writes a certificate for 127.0.0.1 and its key; pool trusts it.
func selfSigned(t *testing.T) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "sluice-test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, IsCA: true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}
