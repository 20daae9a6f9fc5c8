package opshttp

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strings"
)

// Listen says where the server listens and who may call the routes that
// pipelines mount with Handle. GET and HEAD of /metrics, /healthz and
// /readyz are always answered.
//
// Every other request must name the server in its Host header: the bound
// address, a loopback name when it is bound on loopback, any IP literal when
// it is bound on every interface, the host of Addr, or one of Hosts. This
// defeats DNS rebinding (a browser sends the attacker's name). A write
// (any method but GET and HEAD) must in addition come from no browser origin
// or the server's own (Origin, Sec-Fetch-Site), carry
// "Authorization: Bearer <Token>" when Token is set, and have the
// Content-Type application/json.
type Listen struct {
	// Addr is host:port; port 0 picks a free port.
	Addr string
	// Token, when not empty, is the bearer token every write must carry.
	// It is compared in constant time and never logged or echoed.
	Token string
	// Hosts are further names clients use to reach the server (a Service
	// name, an ingress host); compared without the port, case-insensitively.
	Hosts []string
	// Open allows a non-loopback Addr without a Token.
	Open bool
	// CertFile and KeyFile, both or neither, make the server speak HTTPS
	// with this PEM certificate chain and key, read once at start.
	CertFile, KeyFile string
}

// ErrUnauthenticated is returned (wrapped) by Check for an address other
// hosts can reach when no Token is set and Open is false.
var ErrUnauthenticated = errors.New("the API would accept unauthenticated writes from other hosts")

// Check validates l before anything is bound. An address is on loopback
// when its host is "localhost" or a loopback IP; an empty host or any other
// name counts as reachable from other hosts.
func (l Listen) Check() error {
	if (l.CertFile == "") != (l.KeyFile == "") {
		return errors.New("ops http tls: a certificate needs its key and a key its certificate")
	}
	host, _, err := net.SplitHostPort(l.Addr)
	if err != nil {
		return fmt.Errorf("ops http address %q: %w", l.Addr, err)
	}
	if l.Token == "" && !l.Open && !loopbackHost(host) {
		return fmt.Errorf("ops http %s: %w", l.Addr, ErrUnauthenticated)
	}
	return nil
}

func loopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// openPath reports the paths answered to GET and HEAD without any check:
// probes and scrapers address the pod by IP and carry no token.
func openPath(p string) bool {
	switch p {
	case "/metrics", "/healthz", "/readyz":
		return true
	}
	return false
}

// guard enforces a Listen's rules in front of the routes.
type guard struct {
	next     http.Handler
	log      *slog.Logger
	token    [sha256.Size]byte
	hasToken bool
	names    map[string]bool // accepted Host names, normalised
	anyIP    bool            // bound on every interface: any IP literal names it
}

// newGuard returns the guard of l for a server bound at bound.
func newGuard(next http.Handler, l Listen, bound net.Addr, log *slog.Logger) *guard {
	g := &guard{next: next, log: log, names: map[string]bool{}}
	if l.Token != "" {
		g.token, g.hasToken = sha256.Sum256([]byte(l.Token)), true
	}
	for _, h := range l.Hosts {
		if h = normHost(h); h != "" {
			g.names[h] = true
		}
	}
	if host, _, err := net.SplitHostPort(l.Addr); err == nil && host != "" {
		g.names[normHost(host)] = true
	}
	var ip net.IP
	if ta, ok := bound.(*net.TCPAddr); ok {
		ip = ta.IP
	}
	switch {
	case ip == nil:
	case ip.IsUnspecified():
		g.anyIP = true
		g.names["localhost"] = true
	case ip.IsLoopback():
		for _, n := range []string{"localhost", "127.0.0.1", "::1", ip.String()} {
			g.names[n] = true
		}
	default:
		g.names[ip.String()] = true
	}
	return g
}

// normHost is the lower-case host of a Host header or name, without port,
// brackets or trailing dot.
func normHost(h string) string {
	if host, _, err := net.SplitHostPort(h); err == nil {
		h = host
	}
	h = strings.TrimSuffix(strings.Trim(h, "[]"), ".")
	return strings.ToLower(h)
}

func (g *guard) hostAllowed(hostport string) bool {
	h := normHost(hostport)
	if g.names[h] {
		return true
	}
	return g.anyIP && net.ParseIP(h) != nil
}

func (g *guard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	read := r.Method == http.MethodGet || r.Method == http.MethodHead
	if read && openPath(r.URL.Path) {
		g.next.ServeHTTP(w, r)
		return
	}
	if !g.hostAllowed(r.Host) {
		g.refuse(w, r, http.StatusMisdirectedRequest, "host", "this server does not answer to that Host name")
		return
	}
	if read {
		g.next.ServeHTTP(w, r)
		return
	}
	if !sameOrigin(r) {
		g.refuse(w, r, http.StatusForbidden, "origin", "cross-site requests are refused")
		return
	}
	if g.hasToken && !g.authorized(r) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="sluice"`)
		g.refuse(w, r, http.StatusUnauthorized, "token", "missing or wrong bearer token")
		return
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		g.refuse(w, r, http.StatusUnsupportedMediaType, "content_type", "Content-Type must be application/json")
		return
	}
	g.next.ServeHTTP(w, r)
}

// authorized reports whether r carries the bearer token. Both sides are
// hashed first so that the comparison takes the same time whatever the
// length of the token sent.
func (g *guard) authorized(r *http.Request) bool {
	scheme, cred, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	sum := sha256.Sum256([]byte(strings.TrimSpace(cred)))
	return subtle.ConstantTimeCompare(sum[:], g.token[:]) == 1
}

// sameOrigin reports whether r is not a cross-origin browser request: no
// Origin header (a CLI, curl) or one naming the scheme, host and port the
// request was sent to, and no Sec-Fetch-Site other than same-origin or
// none (a user-typed navigation).
func sameOrigin(r *http.Request) bool {
	switch r.Header.Get("Sec-Fetch-Site") {
	case "", "same-origin", "none":
	default:
		return false
	}
	o := r.Header.Get("Origin")
	if o == "" {
		return true
	}
	u, err := url.Parse(o)
	if err != nil || u.Host == "" || u.User != nil || (u.Path != "" && u.Path != "/") {
		return false // includes "null" (sandboxed frames, file:, redirects)
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return strings.EqualFold(u.Scheme, scheme) && withPort(u.Host, scheme) == withPort(r.Host, scheme)
}

// withPort is host:port in lower case, with the scheme's default port when
// hostport has none.
func withPort(hostport, scheme string) string {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		host, port = strings.Trim(hostport, "[]"), map[string]string{"http": "80", "https": "443"}[scheme]
	}
	return net.JoinHostPort(strings.ToLower(strings.TrimSuffix(host, ".")), port)
}

// refuse answers a refused request with a JSON error; the log line names
// the rule, never a header value.
func (g *guard) refuse(w http.ResponseWriter, r *http.Request, code int, rule, msg string) {
	g.log.Info("ops http: request refused", "rule", rule, "status", code, "method", r.Method, "path", r.URL.Path, "remote", r.RemoteAddr)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": msg})
}
