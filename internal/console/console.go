// Package console is sluice's web console: a server-rendered operator UI
// over the consumer groups, dead letters and jobs of the declared
// pipelines.
//
// Contract:
//   - Reading needs nothing; every page renders without JavaScript (htmx
//     refreshes the overview and uPlot draws the lag chart when it runs).
//     Static assets are embedded: nothing is loaded from elsewhere.
//   - Writes (the dead-letter redrive) need the operator token
//     (Config.Token, SLUICE_CONSOLE_TOKEN) and the page's CSRF token; with
//     no operator token the console is read-only and refuses every write
//     with 403.
//   - Listen refuses a non-loopback address when no token is set, and a
//     console without a token answers only requests whose Host is localhost
//     or an IP address (a DNS-rebinding guard).
//   - Record keys, values and headers are rendered as escaped text;
//     service URLs and credentials are never rendered.
package console

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/pipelines"
	"github.com/sluicehq/sluice/topics"
)

// DefaultAddr is where the console listens unless told otherwise.
const DefaultAddr = "127.0.0.1:8080"

// TokenEnv names the environment variable of the operator token.
const TokenEnv = "SLUICE_CONSOLE_TOKEN"

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// PgQuerier is the PostgreSQL access the console uses (a *pgxpool.Pool
// satisfies it); it only reads.
type PgQuerier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Config says what the console reads and how it serves.
type Config struct {
	// Kafka are the connection options (required).
	Kafka []kgo.Opt
	// Pipelines are the declared pipelines whose groups, DLQ topics and
	// jobs the console shows (registry.All).
	Pipelines []pipelines.Spec
	// Token, when set, allows writes; see the package contract.
	Token string
	// Redis is the base client of the smap progress state (optional: the
	// Jobs page says when it is not configured). The console derives the
	// client of the state database from it.
	Redis *redis.Client
	// Postgres, optional, adds the control_flags mirror to the overview
	// and the modules freshness matrix to the Jobs page.
	Postgres PgQuerier
	// JobsTopic is the ticks job-state topic (default ingest.jobs);
	// FlagsTopic the control flags (default control.flags).
	JobsTopic, FlagsTopic string
	// TradesStateTopic is trades-import's compacted import-state topic
	// (default trades.import.state).
	TradesStateTopic string
	// SmapKeyPrefix is the Redis key prefix of smap projects (default
	// smap:proj:); SmapRedisDB its database (default 1).
	SmapKeyPrefix string
	SmapRedisDB   int
	// SampleEvery is the lag sampling period (default 5 s); Window how
	// long the chart looks back (default 15 min).
	SampleEvery, Window time.Duration
	// Logger receives request errors (default: discard).
	Logger *slog.Logger
}

func (c Config) withDefaults() Config {
	if c.JobsTopic == "" {
		c.JobsTopic = topics.IngestJobs
	}
	if c.FlagsTopic == "" {
		c.FlagsTopic = topics.ControlFlags
	}
	if c.TradesStateTopic == "" {
		c.TradesStateTopic = topics.TradesImportState
	}
	if c.SmapKeyPrefix == "" {
		c.SmapKeyPrefix = "smap:proj:"
	}
	if c.SmapRedisDB == 0 {
		c.SmapRedisDB = 1
	}
	if c.SampleEvery <= 0 {
		c.SampleEvery = 5 * time.Second
	}
	if c.Window <= 0 {
		c.Window = 15 * time.Minute
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Console serves the UI. Its handler is safe for concurrent use; Sample
// runs the lag sampler the overview's chart and rates read.
type Console struct {
	cfg      Config
	cl       *kgo.Client
	adm      *kadm.Client
	tmpl     *template.Template
	csrf     string
	samples  *sampler
	smapRdb  *redis.Client
	closeRdb func() error
}

// New connects a Kafka client (lazily: it dials on first use) and parses
// the templates. Close releases the client.
func New(cfg Config) (*Console, error) {
	cfg = cfg.withDefaults()
	if len(cfg.Kafka) == 0 {
		return nil, errors.New("console: no Kafka options")
	}
	cl, err := kgo.NewClient(cfg.Kafka...)
	if err != nil {
		return nil, fmt.Errorf("console: kafka client: %w", err)
	}
	t, err := template.New("").Funcs(funcs).ParseFS(templateFS, "templates/*.html")
	if err != nil {
		cl.Close()
		return nil, fmt.Errorf("console: templates: %w", err)
	}
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		cl.Close()
		return nil, fmt.Errorf("console: csrf key: %w", err)
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte("sluice-console-csrf"))
	c := &Console{cfg: cfg, cl: cl, adm: kadm.NewClient(cl), tmpl: t, csrf: hex.EncodeToString(mac.Sum(nil)),
		samples: newSampler(cfg.Window), closeRdb: func() error { return nil }}
	if cfg.Redis != nil {
		o := *cfg.Redis.Options()
		if o.DB == cfg.SmapRedisDB {
			c.smapRdb = cfg.Redis
		} else {
			o.DB = cfg.SmapRedisDB
			o.PushNotificationProcessor = nil // see smap.StateClient
			c.smapRdb = redis.NewClient(&o)
			c.closeRdb = c.smapRdb.Close
		}
	}
	return c, nil
}

// Close releases the console's clients.
func (c *Console) Close() {
	c.cl.Close()
	_ = c.closeRdb()
}

// CheckAddr refuses to serve on addr without a token unless addr is a
// loopback address (127.0.0.0/8, ::1 or localhost): anyone who can reach
// the port could otherwise read every dead letter.
func CheckAddr(addr, token string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("console: invalid address %q: %w", addr, err)
	}
	if token != "" || host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("console: refusing to listen on %s without %s: a non-loopback address exposes the dead letters to the network (set the token, or bind 127.0.0.1)", addr, TokenEnv)
}

// Listen checks addr with CheckAddr and listens on it.
func Listen(addr, token string) (net.Listener, error) {
	if err := CheckAddr(addr, token); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("console: listen %s: %w", addr, err)
	}
	return ln, nil
}

// Serve runs the lag sampler and serves on ln (from Listen) until ctx
// ends, then shuts the server down; it closes ln.
func (c *Console) Serve(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{Handler: c.Handler(), ReadHeaderTimeout: 10 * time.Second}
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	go c.Sample(sctx)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("console: serve: %w", err)
	case <-ctx.Done():
	}
	shctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shctx); err != nil {
		return fmt.Errorf("console: shutdown: %w", err)
	}
	return nil
}

// Handler returns the console's routes with its security headers.
func (c *Console) Handler() http.Handler {
	mux := http.NewServeMux()
	static, _ := fs.Sub(staticFS, "static")
	mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	mux.HandleFunc("GET /{$}", c.overview)
	mux.HandleFunc("GET /dlq", c.deadLetters)
	mux.HandleFunc("POST /dlq/redrive", c.redrive)
	mux.HandleFunc("GET /jobs", c.jobs)
	mux.HandleFunc("GET /api/lag", c.lagJSON)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c.cfg.Token == "" && !loopbackHost(r.Host) {
			// A read-only console listens on loopback (CheckAddr): a
			// request naming another host reached it through DNS
			// rebinding, from a page that must not read the dead letters.
			http.Error(w, "console: unexpected Host "+strconv.Quote(r.Host)+": a console without "+TokenEnv+" answers only localhost and loopback addresses", http.StatusForbidden)
			return
		}
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; frame-ancestors 'none'; form-action 'self'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-store")
		mux.ServeHTTP(w, r)
	})
}

// authorizeWrite checks a write request: the console must have a token,
// the request must carry it (form field token or Authorization: Bearer)
// and the page's CSRF token (form field csrf). It returns the status and
// message of a refusal, or 0.
func (c *Console) authorizeWrite(r *http.Request) (int, string) {
	if c.cfg.Token == "" {
		return http.StatusForbidden, "This console is read-only: start it with " + TokenEnv + " set to allow redrives."
	}
	if !equal(r.PostFormValue("csrf"), c.csrf) {
		return http.StatusForbidden, "The form's CSRF token is missing or wrong: reload the page and try again."
	}
	given := r.PostFormValue("token")
	if b, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok && given == "" {
		given = b
	}
	if !equal(given, c.cfg.Token) {
		return http.StatusForbidden, "The operator token is missing or wrong."
	}
	return 0, ""
}

// loopbackHost reports whether the Host header hostport names this
// machine: localhost or an IP literal (a rebinding attack needs a name).
func loopbackHost(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	return host == "localhost" || net.ParseIP(host) != nil
}

func equal(a, b string) bool {
	return a != "" && subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1
}
