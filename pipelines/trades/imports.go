package trades

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"sort"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/internal/opshttp"
)

// ImportRequest is the body of POST /api/v1/trades/imports. Since is a date
// YYYY-MM-DD or an RFC 3339 time (default: UTC today − 30 days, resolved
// before the import id is hashed); Broker defaults to synthetic.
type ImportRequest struct {
	UserID  string            `json:"user_id"`
	Since   string            `json:"since,omitempty"`
	Broker  string            `json:"broker,omitempty"`
	Force   bool              `json:"force,omitempty"`
	Options *SyntheticOptions `json:"options,omitempty"`
}

// ImportResult describes the import command sent.
type ImportResult struct {
	ImportID  string `json:"import_id"`
	UserID    string `json:"user_id"`
	Since     string `json:"since"`
	Broker    string `json:"broker"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
}

// InputError is a request the imports API refuses (HTTP 400).
type InputError struct{ Err error }

func (e *InputError) Error() string { return e.Err.Error() }
func (e *InputError) Unwrap() error { return e.Err }

// DefaultSinceDays is how far back an import without since reaches.
const DefaultSinceDays = 30

// ResolveSince returns since, or when it is empty the default: now's UTC
// date minus DefaultSinceDays, as YYYY-MM-DD.
func ResolveSince(since string, now time.Time) string {
	if since != "" {
		return since
	}
	return now.UTC().AddDate(0, 0, -DefaultSinceDays).Format(time.DateOnly)
}

// Imports sends import commands to trades.import and reads import states
// from trades.import.state (the CLI and the API). It writes no state: the
// trades-import member owning the user's partition does. Safe for
// concurrent use.
type Imports struct {
	cl          *kgo.Client
	kopts       []kgo.Opt
	importTopic string
	state       string
	now         func() time.Time
}

// NewImports returns an Imports producing with cl (a partitioner hashing
// keys like Kafka's default, e.g. franz-go's default) to cfg.ImportTopic
// and reading cfg.StateTopic with kopts.
func NewImports(cl *kgo.Client, kopts []kgo.Opt, cfg ImportConfig) *Imports {
	cfg = cfg.withDefaults()
	return &Imports{cl: cl, kopts: kopts, importTopic: cfg.ImportTopic, state: cfg.StateTopic, now: cfg.Now}
}

// Command returns the import command of req with its defaults resolved
// (since, broker) and checked against the import rules; a refused request
// is an *InputError.
func (c *Imports) Command(req ImportRequest) (ImportCommand, error) {
	return req.Command(c.now())
}

// Command returns the import command of req at now (see Imports.Command).
func (req ImportRequest) Command(now time.Time) (ImportCommand, error) {
	cmd := ImportCommand{UserID: req.UserID, Since: ResolveSince(req.Since, now), Broker: req.Broker, Force: req.Force, Options: req.Options}
	if cmd.Broker == "" {
		cmd.Broker = BrokerSynthetic
	}
	if err := cmd.Validate(cmd.UserID, now); err != nil {
		return cmd, &InputError{Err: err}
	}
	return cmd, nil
}

// Import sends the import command of req, keyed by its user, and waits for
// the broker's acknowledgement.
func (c *Imports) Import(ctx context.Context, req ImportRequest) (ImportResult, error) {
	cmd, err := c.Command(req)
	if err != nil {
		return ImportResult{}, err
	}
	v, err := json.Marshal(cmd)
	if err != nil {
		return ImportResult{}, fmt.Errorf("encode import command: %w", err)
	}
	rec := &kgo.Record{Topic: c.importTopic, Key: []byte(cmd.UserID), Value: v}
	if err := c.cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
		return ImportResult{}, fmt.Errorf("send import command for %s: %w", cmd.UserID, err)
	}
	return ImportResult{ImportID: cmd.ImportID(), UserID: cmd.UserID, Since: cmd.Since, Broker: cmd.Broker, Partition: rec.Partition, Offset: rec.Offset}, nil
}

// Status returns the state of one import (nil when there is none).
func (c *Imports) Status(ctx context.Context, importID string) (*ImportState, error) {
	all, err := ReadImports(ctx, c.kopts, c.state)
	if err != nil {
		return nil, err
	}
	if st, ok := all[importID]; ok {
		return &st, nil
	}
	return nil, nil
}

// ByUser returns the states of the user's imports, the latest started
// first.
func (c *Imports) ByUser(ctx context.Context, userID string) ([]ImportState, error) {
	all, err := ReadImports(ctx, c.kopts, c.state)
	if err != nil {
		return nil, err
	}
	return UserImports(all, userID), nil
}

// UserImports returns the states of all that belong to userID, the latest
// started first.
func UserImports(all map[string]ImportState, userID string) []ImportState {
	var out []ImportState
	for _, st := range all {
		if st.UserID == userID {
			out = append(out, st)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].StartedAt.Equal(out[j].StartedAt) {
			return out[i].StartedAt.After(out[j].StartedAt)
		}
		return out[i].ImportID < out[j].ImportID
	})
	return out
}

var importIDPattern = regexp.MustCompile(`^[0-9a-f]{64}$`)

// CheckImportID reports whether id is an import id (64 lower-case hex
// digits).
func CheckImportID(id string) error {
	if !importIDPattern.MatchString(id) {
		return fmt.Errorf("import id %q is not 64 lower-case hex digits", clip(id))
	}
	return nil
}

// Routes returns the imports API: POST /api/v1/trades/imports (202 with an
// ImportResult) and GET /api/v1/trades/imports/{import_id} (the
// ImportState, 404 when there is none).
func (c *Imports) Routes() map[string]http.Handler {
	return map[string]http.Handler{
		"POST /api/v1/trades/imports":            http.HandlerFunc(c.handleImport),
		"GET /api/v1/trades/imports/{import_id}": http.HandlerFunc(c.handleStatus),
	}
}

func (c *Imports) handleImport(w http.ResponseWriter, r *http.Request) {
	var req ImportRequest
	if !opshttp.DecodeBody(w, r, &req, "{user_id, since?, broker?, force?, options?}") {
		return
	}
	res, err := c.Import(r.Context(), req)
	var ie *InputError
	opshttp.WriteAccepted(w, res, err, errors.As(err, &ie))
}

func (c *Imports) handleStatus(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("import_id")
	if err := CheckImportID(id); err != nil {
		opshttp.WriteJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	st, err := c.Status(r.Context(), id)
	switch {
	case err != nil:
		opshttp.WriteJSON(w, http.StatusServiceUnavailable, map[string]string{"error": err.Error()})
	case st == nil:
		opshttp.WriteJSON(w, http.StatusNotFound, map[string]string{"error": "no import " + id})
	default:
		opshttp.WriteJSON(w, http.StatusOK, st)
	}
}
