// Package schemas holds sluice's record contracts and database schema, both
// embedded in the binary:
//
//   - json/*.json: a JSON Schema (draft 2020-12) per record type. Names lists
//     them, Compile compiles them all, and (*Set).Validate checks a document
//     and reports the JSON pointer of every failure. The schemas describe
//     shape and types; business rules (e.g. the silver sanity rules) are
//     enforced by the pipelines in Go.
//   - migrations/*.sql: goose migrations of the PostgreSQL tables, applied by
//     Migrate / MigrateDB into the first schema of the connection's
//     search_path.
package schemas

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

//go:embed json/*.json
var jsonFiles embed.FS

// BaseURL is the base of every schema's $id: the schema named n has the $id
// BaseURL + n + ".json", and schemas refer to each other relatively.
const BaseURL = "https://schemas.sluice.dev/"

// Schema names, one per record type.
const (
	SilverEnvelope       = "silver.envelope"
	TABar                = "ta.bar"
	SAArticle            = "sa.article"
	ControlFlag          = "control.flag"
	IngestTask           = "ingest.task"
	IngestJob            = "ingest.job"
	SmapEvent            = "smap.event"
	SmapProjectCreated   = "smap.project.created"
	SmapDataCollected    = "smap.data.collected"
	SmapAnalysisFinished = "smap.analysis.finished"
	SmapJobCompleted     = "smap.job.completed"

	// trades (docs/pipelines/trades.md): TradesEvent is the envelope of
	// every event; each Trades<Type> schema is the envelope with its type
	// and payload.
	TradesCommand         = "trades.command"
	TradesRawTrade        = "trades.raw_trade"
	TradesImportState     = "trades.import.state"
	TradesEvent           = "trades.event"
	TradesTradeUpserted   = "trades.trade.upserted"
	TradesImportProgress  = "trades.import.progress"
	TradesImportCompleted = "trades.import.completed"
	TradesImportFailed    = "trades.import.failed"
	TradesScoreRequest    = "trades.score.request"
	TradesTradeScored     = "trades.trade.scored"
	TradesDigestRequest   = "trades.digest.request"
	TradesCoachReflect    = "trades.coach.reflect"
	TradesDigestReady     = "trades.digest.ready"
	TradesDigestState     = "trades.digest.state"
	TradesDigestObject    = "trades.digest.object"

	// modules (docs/pipelines/modules.md).
	ModulesRefresh = "modules.refresh"
	ModulesState   = "modules.state"
)

// Names returns the name of every embedded schema, sorted.
func Names() []string {
	return embeddedNames(jsonFiles, "json", func(file string) (string, bool) {
		return strings.CutSuffix(file, ".json")
	})
}

// embeddedNames returns, sorted, name(f) of every file f of the embedded
// directory dir of fsys for which name reports true.
func embeddedNames(fsys fs.FS, dir string, name func(file string) (string, bool)) []string {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil { // cannot happen: the directory is embedded
		panic(fmt.Sprintf("schemas: embedded %s directory: %v", dir, err))
	}
	var names []string
	for _, e := range entries {
		if n, ok := name(e.Name()); ok {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	return names
}

// Source returns the JSON text of the named schema.
func Source(name string) ([]byte, error) {
	b, err := jsonFiles.ReadFile(path.Join("json", name+".json"))
	if err != nil {
		return nil, fmt.Errorf("schemas: unknown schema %q", name)
	}
	return b, nil
}

// Set is a compiled set of every embedded schema. It is immutable and safe
// for concurrent use.
type Set struct {
	schemas map[string]*jsonschema.Schema
}

// Compile compiles every embedded schema (draft 2020-12, formats asserted:
// date, date-time and uuid values must be valid).
func Compile() (*Set, error) {
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	names := Names()
	for _, n := range names {
		src, err := Source(n)
		if err != nil {
			return nil, err
		}
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(src))
		if err != nil {
			return nil, fmt.Errorf("schemas: parse %s: %w", n, err)
		}
		if err := c.AddResource(BaseURL+n+".json", doc); err != nil {
			return nil, fmt.Errorf("schemas: add %s: %w", n, err)
		}
	}
	set := &Set{schemas: make(map[string]*jsonschema.Schema, len(names))}
	for _, n := range names {
		sch, err := c.Compile(BaseURL + n + ".json")
		if err != nil {
			return nil, fmt.Errorf("schemas: compile %s: %w", n, err)
		}
		set.schemas[n] = sch
	}
	return set, nil
}

// Problem is one reason a document failed its schema.
type Problem struct {
	// Pointer is the JSON pointer (RFC 6901) of the failing value; for a
	// missing required property it points at the property that is missing.
	// The document itself is "".
	Pointer string
	// Message says what is wrong.
	Message string
}

// ValidationError is returned by (*Set).Validate when a document is valid
// JSON but does not match its schema. Problems are sorted by pointer, without
// duplicates.
type ValidationError struct {
	Schema   string
	Problems []Problem
}

func (e *ValidationError) Error() string {
	if len(e.Problems) == 0 {
		return fmt.Sprintf("schema %s: invalid document", e.Schema)
	}
	p := e.Problems[0]
	msg := fmt.Sprintf("schema %s: at %q: %s", e.Schema, p.Pointer, p.Message)
	if n := len(e.Problems) - 1; n > 0 {
		msg += fmt.Sprintf(" (and %d more)", n)
	}
	return msg
}

// Pointers returns the pointer of every problem, in order.
func (e *ValidationError) Pointers() []string {
	out := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		out[i] = p.Pointer
	}
	return out
}

// ErrUnknownSchema is returned by Validate for a name that is not in the set.
var ErrUnknownSchema = errors.New("unknown schema")

// Validate checks doc against the named schema. It returns nil when doc is
// valid, a *ValidationError naming the failing JSON pointers when it does not
// match, and another error when doc is not JSON or name is unknown.
func (s *Set) Validate(name string, doc []byte) error {
	sch, ok := s.schemas[name]
	if !ok {
		return fmt.Errorf("schemas: %w %q", ErrUnknownSchema, name)
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		return fmt.Errorf("schema %s: invalid JSON: %w", name, err)
	}
	err = sch.Validate(v)
	var ve *jsonschema.ValidationError
	if errors.As(err, &ve) {
		out := &ValidationError{Schema: name}
		collect(ve, message.NewPrinter(language.English), &out.Problems)
		slices.SortFunc(out.Problems, func(a, b Problem) int {
			if c := strings.Compare(a.Pointer, b.Pointer); c != 0 {
				return c
			}
			return strings.Compare(a.Message, b.Message)
		})
		// The same value can fail the same way through two paths (e.g. a
		// property's own type and a conditional $ref).
		out.Problems = slices.Compact(out.Problems)
		return out
	}
	if err != nil {
		return fmt.Errorf("schema %s: %w", name, err)
	}
	return nil
}

// collect appends the leaf errors of ve: the causes that say what is wrong
// rather than which keyword ($ref, allOf, then …) led there.
func collect(ve *jsonschema.ValidationError, p *message.Printer, out *[]Problem) {
	if len(ve.Causes) > 0 {
		for _, c := range ve.Causes {
			collect(c, p, out)
		}
		return
	}
	ptr := pointer(ve.InstanceLocation)
	if req, ok := ve.ErrorKind.(*kind.Required); ok {
		for _, m := range req.Missing {
			*out = append(*out, Problem{Pointer: ptr + "/" + escape(m), Message: "required property is missing"})
		}
		return
	}
	*out = append(*out, Problem{Pointer: ptr, Message: ve.ErrorKind.LocalizedString(p)})
}

func pointer(tokens []string) string {
	var b strings.Builder
	for _, t := range tokens {
		b.WriteByte('/')
		b.WriteString(escape(t))
	}
	return b.String()
}

func escape(tok string) string {
	return strings.ReplaceAll(strings.ReplaceAll(tok, "~", "~0"), "/", "~1")
}
