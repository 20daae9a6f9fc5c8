package silver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/sluicehq/sluice/pipelines/silver/internal/jsonidx"
	"github.com/sluicehq/sluice/stages"
)

// Rule ids (fixed by the design), in evaluation order. The first failing
// rule of a record is the one reported in dlq.rule.
const (
	RuleTASymbol        = "ta.symbol"
	RuleTATradeDate     = "ta.trade_date"
	RuleTAPrice         = "ta.price"
	RuleTAPriceRelation = "ta.price_relation"
	RuleTAVolume        = "ta.volume"
	RuleTAZeroVolume    = "ta.zero_volume"
	RuleTACurrency      = "ta.currency"
	RuleSAURL           = "sa.url"
	RuleSAPublisherTime = "sa.publisher_time"
	RuleSAFirstSeen     = "sa.first_seen"
	RuleSAText          = "sa.text"
	RuleSAContentHash   = "sa.content_hash"
	RuleSASymbols       = "sa.symbols"
	RuleSASourceDomain  = "sa.source_domain"
)

// Rules returns every rule id in evaluation order (ta rules, then sa rules).
func Rules() []string {
	return []string{
		RuleTASymbol, RuleTATradeDate, RuleTAPrice, RuleTAPriceRelation, RuleTAVolume,
		RuleTAZeroVolume, RuleTACurrency,
		RuleSAURL, RuleSAPublisherTime, RuleSAFirstSeen, RuleSAText, RuleSAContentHash,
		RuleSASymbols, RuleSASourceDomain,
	}
}

// Thresholds of the rules (seed 000 §3).
const (
	// MinTextLength is the minimum length of text_normalized in Unicode code
	// points.
	MinTextLength = 120
	// PublisherTimeSkew is how far in the future publisher_time may be.
	PublisherTimeSkew = 5 * time.Minute
	// FirstSeenMaxLag is how long before publisher_time first_seen_time may be.
	FirstSeenMaxLag = 24 * time.Hour
	// MinTradeYear: rule ta.trade_date rejects dates before January 1st
	// of this year (1900-01-01). Without a lower bound 0000-01-01 passed
	// and was stored as 0001-01-01 BC.
	MinTradeYear = 1900
	// DefaultCurrency replaces an absent or empty ta currency.
	DefaultCurrency = "VND"
	// DefaultMarketZone is the market time zone that decides "today" for
	// trade dates.
	DefaultMarketZone = "Asia/Ho_Chi_Minh"
	// LanguageUnknown replaces any language other than "vi" and "en".
	LanguageUnknown = "unknown"
)

// Option configures [NewValidator] and [Stage].
type Option func(*Validator)

// WithClock sets the clock the rules read "now" from (default time.Now).
func WithClock(now func() time.Time) Option {
	return func(v *Validator) {
		if now != nil {
			v.now = now
		}
	}
}

// WithMarketLocation sets the market time zone that decides "today" for
// rule ta.trade_date (default [DefaultMarketZone]).
func WithMarketLocation(loc *time.Location) Option {
	return func(v *Validator) {
		if loc != nil {
			v.loc = loc
		}
	}
}

// Validator applies the sanity rules and maps payloads to rows. It is
// safe for concurrent use (the runtime calls its stage from every
// partition's worker at once): its settings are immutable after
// construction, and each call takes the memory its row is carved from
// (rowMemory) from a pool for its duration.
type Validator struct {
	now func() time.Time
	loc *time.Location
	mem rowMemPool
}

// NewValidator returns a validator with the given options.
func NewValidator(opts ...Option) *Validator {
	v := &Validator{now: time.Now, loc: defaultMarketLocation()}
	for _, o := range opts {
		o(v)
	}
	return v
}

// defaultMarketLocation loads Asia/Ho_Chi_Minh from the system's zone
// database; without one it falls back to the fixed UTC+7 offset, which is
// the same zone (Vietnam has had no daylight saving time since 1975).
func defaultMarketLocation() *time.Location {
	if loc, err := time.LoadLocation(DefaultMarketZone); err == nil {
		return loc
	}
	return time.FixedZone("UTC+07", 7*60*60)
}

// Stage returns the silver validate-and-transform stage: one Row per valid
// envelope; a failed rule dead-letters the record with reason sanity_fail
// and the rule id; an unmappable payload dead-letters it with decode_error.
// The Kafka record timestamp (m.Source.Timestamp) is the fallback for
// ta first_seen_time (see the package doc). Safe for concurrent use.
func Stage(opts ...Option) stages.Func[Envelope, Row] {
	v := NewValidator(opts...)
	return v.Stage
}

// Stage is the [stages.Func] form of [Validator.Transform].
func (v *Validator) Stage(_ context.Context, m stages.Msg[Envelope]) ([]Row, error) {
	return v.transform(&m.Value, m.Source.Timestamp)
}

// Transform validates env and maps it to its row. recordTime is the Kafka
// record timestamp (zero when unknown), used only as a fallback for
// ta first_seen_time. Errors are classified with [stages.DeadLetter].
//
// The row owns its memory (nothing of env's bytes), but shares the chunks
// it is carved from with the rows made just before and after it: keeping
// one row for long keeps tens of rows' worth of memory (see rowMemory).
func (v *Validator) Transform(env Envelope, recordTime time.Time) (Row, error) {
	rows, err := v.transform(&env, recordTime)
	if err != nil {
		return Row{}, err
	}
	return rows[0], nil
}

// transform is Transform returning the row as a one-element slice, which
// shares its memory with the row.
func (v *Validator) transform(env *Envelope, recordTime time.Time) ([]Row, error) {
	var p payload
	if err := p.index(env); err != nil {
		return nil, err
	}
	mem := v.mem.get()
	defer v.mem.put(mem)
	switch env.TaskType {
	case TaskTA:
		return v.transformTA(&p, env, recordTime, mem)
	case TaskSA:
		return v.transformSA(&p, env, mem)
	}
	return nil, stages.DeadLetter(stages.ReasonUnknownTaskType, "", fmt.Errorf("unknown task_type %q", env.TaskType))
}

// fail dead-letters a record that failed rule, with reason sanity_fail;
// except that a string the rule reads that is not text
// (jsonidx.ErrInvalidText) is undecodable JSON, whatever rule reads it:
// decode_error, no rule.
func fail(rule string, err error) error {
	if errors.Is(err, jsonidx.ErrInvalidText) {
		return decodeFail(err)
	}
	return stages.DeadLetter(stages.ReasonSanityFail, rule, err)
}

func failf(rule, format string, args ...any) error {
	return fail(rule, fmt.Errorf(format, args...))
}

func decodeFail(err error) error {
	return stages.DeadLetter(stages.ReasonDecodeError, "", fmt.Errorf("payload: %w", err))
}

// taOut is a ta row together with what its pointer columns point to and the
// slice Stage returns, so that they are one object (of a rowMemory chunk).
type taOut struct {
	rows                [1]Row
	row                 TARow
	vwap, adjClose      float64
	source, contentHash string
}

// saOut is taOut for an sa row.
type saOut struct {
	rows                          [1]Row
	row                           SARow
	language, title, text, author string
	hype                          [3]float64 // raw, crowd, elitist
	weights                       bool
}

func (v *Validator) transformTA(p *payload, env *Envelope, recordTime time.Time, mem *rowMemory) ([]Row, error) {
	out := mem.newTA()
	r := &out.row
	text := rowText{mem: mem}

	// ta.symbol
	sym, err := p.requiredString(fSymbol)
	if err != nil {
		return nil, fail(RuleTASymbol, err)
	}
	if !isSymbol(sym) {
		return nil, failf(RuleTASymbol, "symbol %q does not match ^[A-Z]{3,7}$", sym)
	}
	text.add(&r.Symbol, sym)

	// ta.trade_date
	ds, err := p.requiredString(fTradeDate)
	if err != nil {
		return nil, fail(RuleTATradeDate, err)
	}
	d, ok := jsonidx.ParseDate(ds)
	if !ok {
		return nil, failf(RuleTATradeDate, "trade_date %q is not a valid YYYY-MM-DD date", ds)
	}
	if d.Year() < MinTradeYear {
		return nil, failf(RuleTATradeDate, "trade_date %s is before %d-01-01", ds, MinTradeYear)
	}
	ny, nm, nd := v.now().In(v.loc).Date()
	today := time.Date(ny, nm, nd, 0, 0, 0, 0, time.UTC)
	if d.After(today) {
		return nil, failf(RuleTATradeDate, "trade_date %s is after today (%s in %s)", ds, today.Format(time.DateOnly), v.loc)
	}
	r.TradeDate = d

	// ta.price
	prices := [4]float64{}
	for i := range prices {
		f := fOpen + field(i)
		raw, err := p.requiredNumber(f)
		if err != nil {
			return nil, fail(RuleTAPrice, err)
		}
		x, err := jsonidx.ParseFloat(raw)
		if err != nil {
			return nil, failf(RuleTAPrice, "%s %s: %v", fieldNames[f], raw, err)
		}
		if x < 0 {
			return nil, failf(RuleTAPrice, "%s %s is negative", fieldNames[f], raw)
		}
		prices[i] = x
	}
	r.Open, r.High, r.Low, r.Close = prices[0], prices[1], prices[2], prices[3]

	// ta.price_relation
	switch {
	case r.High < math.Max(r.Open, r.Close):
		return nil, failf(RuleTAPriceRelation, "high %s is below max(open %s, close %s)", fmtF(r.High), fmtF(r.Open), fmtF(r.Close))
	case r.Low > math.Min(r.Open, r.Close):
		return nil, failf(RuleTAPriceRelation, "low %s is above min(open %s, close %s)", fmtF(r.Low), fmtF(r.Open), fmtF(r.Close))
	case r.High < r.Low:
		return nil, failf(RuleTAPriceRelation, "high %s is below low %s", fmtF(r.High), fmtF(r.Low))
	}

	// ta.volume
	vraw, err := p.requiredNumber(fVolume)
	if err != nil {
		return nil, fail(RuleTAVolume, err)
	}
	vol, err := jsonidx.ParseInt(vraw)
	if err != nil {
		return nil, failf(RuleTAVolume, "volume %s: %v", vraw, err)
	}
	if vol < 0 {
		return nil, failf(RuleTAVolume, "volume %s is negative", vraw)
	}
	r.Volume = vol

	// ta.zero_volume
	if vol == 0 && !(r.Open == r.High && r.High == r.Low && r.Low == r.Close) {
		return nil, failf(RuleTAZeroVolume, "volume is 0 but the candle is not flat (open %s, high %s, low %s, close %s)",
			fmtF(r.Open), fmtF(r.High), fmtF(r.Low), fmtF(r.Close))
	}

	// ta.currency
	cur, ok, err := p.optionalString(fCurrency)
	if err != nil {
		return nil, fail(RuleTACurrency, err)
	}
	switch {
	case !ok || len(cur) == 0:
		r.Currency = DefaultCurrency
	case isCurrency(cur):
		r.Currency = currencyString(cur)
	default:
		return nil, failf(RuleTACurrency, "currency %q does not match ^[A-Z]{3}$", cur)
	}

	// Fields without a rule: type checks only.
	if r.VWAP, err = p.optionalFloat(fVWAP, &out.vwap); err != nil {
		return nil, decodeFail(err)
	}
	if r.AdjClose, err = p.optionalFloat(fAdjClose, &out.adjClose); err != nil {
		return nil, decodeFail(err)
	}
	r.PriceMultiplier = 1.0
	if _, err = p.optionalFloat(fPriceMultiplier, &r.PriceMultiplier); err != nil {
		return nil, decodeFail(err)
	}
	if r.Source, err = p.optionalStringPtr(fSource, &out.source, &text); err != nil {
		return nil, decodeFail(err)
	}
	if r.ContentHash, err = p.optionalStringPtr(fContentHash, &out.contentHash, &text); err != nil {
		return nil, decodeFail(err)
	}
	fs, ok, err := p.optionalTime(fFirstSeenTime)
	if err != nil {
		return nil, decodeFail(err)
	}
	switch {
	case ok:
		r.FirstSeenTime = fs
	case !env.FirstSeen.IsZero():
		r.FirstSeenTime = env.FirstSeen
	case !recordTime.IsZero():
		r.FirstSeenTime = recordTime.Truncate(time.Microsecond)
	default:
		r.FirstSeenTime = v.now().Truncate(time.Microsecond)
	}
	text.done()
	mem.keepTA()
	out.rows[0].TA = r
	return out.rows[:], nil
}

func (v *Validator) transformSA(p *payload, env *Envelope, mem *rowMemory) ([]Row, error) {
	out := mem.newSA()
	r := &out.row
	text := rowText{mem: mem}

	// sa.url
	u, err := p.requiredString(fURLCanonical)
	if err != nil {
		return nil, fail(RuleSAURL, err)
	}
	if plainHTTPURL(u) {
		text.add(&r.URLCanonical, u)
	} else {
		s := string(u)
		if err := checkURL(s); err != nil {
			return nil, fail(RuleSAURL, err)
		}
		r.URLCanonical = s
	}

	// sa.publisher_time
	now := v.now()
	pub, ok, err := p.optionalTime(fPublisherTime)
	if err != nil {
		return nil, fail(RuleSAPublisherTime, err)
	}
	if !ok {
		return nil, failf(RuleSAPublisherTime, "publisher_time missing")
	}
	if limit := now.Add(PublisherTimeSkew); pub.After(limit) {
		return nil, failf(RuleSAPublisherTime, "publisher_time %s is more than %s after now (%s)",
			pub.Format(time.RFC3339Nano), PublisherTimeSkew, now.UTC().Format(time.RFC3339Nano))
	}
	r.PublisherTime = pub

	// sa.first_seen
	fs, ok, err := p.optionalTime(fFirstSeenTime)
	if err != nil {
		return nil, fail(RuleSAFirstSeen, err)
	}
	if !ok {
		if env.FirstSeen.IsZero() {
			return nil, failf(RuleSAFirstSeen, "first_seen_time missing (neither in the payload nor in the envelope)")
		}
		fs = env.FirstSeen
	}
	if limit := pub.Add(-FirstSeenMaxLag); fs.Before(limit) {
		return nil, failf(RuleSAFirstSeen, "first_seen_time %s is more than %s before publisher_time %s",
			fs.Format(time.RFC3339Nano), FirstSeenMaxLag, pub.Format(time.RFC3339Nano))
	}
	r.FirstSeenTime = fs

	// sa.text
	tn, err := p.requiredString(fTextNormalized)
	if err != nil {
		return nil, fail(RuleSAText, err)
	}
	if n := jsonidx.RuneCount(tn); n < MinTextLength {
		return nil, failf(RuleSAText, "text_normalized has %d characters, want at least %d", n, MinTextLength)
	}
	text.add(&out.text, tn)
	r.TextNormalized = &out.text

	// sa.content_hash
	hash, err := p.requiredString(fContentHash)
	if err != nil {
		return nil, fail(RuleSAContentHash, err)
	}
	if len(bytes.TrimSpace(hash)) == 0 {
		return nil, failf(RuleSAContentHash, "content_hash is empty")
	}
	text.add(&r.ContentHash, hash)

	// sa.symbols
	syms, ok, err := p.optionalStrings(fSymbols, &text, func(i int, s []byte) error {
		if !isSymbol(s) {
			return fmt.Errorf("symbols[%d] %q does not match ^[A-Z]{3,7}$", i, s)
		}
		return nil
	})
	if err != nil {
		return nil, fail(RuleSASymbols, err)
	}
	if ok {
		r.Symbols = syms
	}

	// sa.source_domain
	dom, err := p.requiredString(fSourceDomain)
	if err != nil {
		return nil, fail(RuleSASourceDomain, err)
	}
	if len(bytes.TrimSpace(dom)) == 0 {
		return nil, failf(RuleSASourceDomain, "source_domain is empty")
	}
	text.add(&r.SourceDomain, dom)

	// language: normalised, never a failure.
	out.language = LanguageUnknown
	if b, ok, err := p.optionalString(fLanguage); ok && err == nil {
		switch string(b) {
		case "vi":
			out.language = "vi"
		case "en":
			out.language = "en"
		}
	}
	r.Language = &out.language

	// Fields without a rule: type checks only.
	if r.Title, err = p.optionalStringPtr(fTitle, &out.title, &text); err != nil {
		return nil, decodeFail(err)
	}
	if r.Author, err = p.optionalStringPtr(fAuthor, &out.author, &text); err != nil {
		return nil, decodeFail(err)
	}
	tags, ok, err := p.optionalStrings(fTopicTags, &text, nil)
	if err != nil {
		return nil, decodeFail(err)
	}
	if ok {
		r.TopicTags = tags
	}
	if r.HypeRaw, err = p.optionalFloat(fHypeRaw, &out.hype[0]); err != nil {
		return nil, decodeFail(err)
	}
	if r.HypeCrowd, err = p.optionalFloat(fHypeCrowd, &out.hype[1]); err != nil {
		return nil, decodeFail(err)
	}
	if r.HypeElitist, err = p.optionalFloat(fHypeElitist, &out.hype[2]); err != nil {
		return nil, decodeFail(err)
	}
	if r.AccountWeightsApplied, err = p.optionalBool(fAccountWeightsApplied, &out.weights); err != nil {
		return nil, decodeFail(err)
	}
	text.done()
	mem.keepSA()
	out.rows[0].SA = r
	return out.rows[:], nil
}

// isSymbol reports whether s matches ^[A-Z]{3,7}$.
func isSymbol[T string | []byte](s T) bool {
	if len(s) < 3 || len(s) > 7 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 'A' || s[i] > 'Z' {
			return false
		}
	}
	return true
}

// isCurrency reports whether s matches ^[A-Z]{3}$.
func isCurrency[T string | []byte](s T) bool {
	return len(s) == 3 && isSymbol(s)
}

// currencyString returns b as a string, without allocating for the usual
// currencies.
func currencyString(b []byte) string {
	switch string(b) {
	case DefaultCurrency:
		return DefaultCurrency
	case "USD":
		return "USD"
	}
	return string(b)
}

// checkURL accepts an absolute http or https URL with a host. White space
// anywhere is refused: no URL holds it unencoded (RFC 3986), and a stray
// space would make another key for the same article (net/url refuses the
// other ASCII control characters itself).
func checkURL(s string) error {
	if strings.TrimSpace(s) == "" {
		return errors.New("url_canonical is empty")
	}
	if i := strings.IndexFunc(s, unicode.IsSpace); i >= 0 {
		return fmt.Errorf("url_canonical %q holds white space at byte %d", s, i)
	}
	u, err := url.Parse(s)
	if err != nil {
		return fmt.Errorf("url_canonical %q is not a URL: %w", s, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("url_canonical %q is not an absolute http or https URL (scheme %q)", s, u.Scheme)
	}
	if u.Hostname() == "" {
		return fmt.Errorf("url_canonical %q has no host", s)
	}
	return nil
}

// plainHTTPURL reports whether b is an URL that checkURL certainly accepts,
// without parsing it: "http://" or "https://", a host of ASCII letters,
// digits, dots and hyphens, and optionally a path of unreserved characters
// and sub-delimiters (no percent-encoding, query or fragment). Any other URL
// may still be valid: checkURL decides.
func plainHTTPURL(b []byte) bool {
	switch {
	case bytes.HasPrefix(b, []byte("https://")):
		b = b[len("https://"):]
	case bytes.HasPrefix(b, []byte("http://")):
		b = b[len("http://"):]
	default:
		return false
	}
	host := 0
	for host < len(b) && b[host] != '/' {
		if c := b[host]; !(('0' <= c && c <= '9') || ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z') || c == '.' || c == '-') {
			return false
		}
		host++
	}
	if host == 0 {
		return false
	}
	for _, c := range b[host:] {
		if !pathChar(c) {
			return false
		}
	}
	return true
}

// pathChar reports whether c is an RFC 3986 unreserved character, a
// sub-delimiter or one of ':', '@', '/'.
func pathChar(c byte) bool {
	switch {
	case ('0' <= c && c <= '9') || ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z'):
		return true
	}
	switch c {
	case '-', '.', '_', '~', '!', '$', '&', '\'', '(', ')', '*', '+', ',', ';', '=', ':', '@', '/':
		return true
	}
	return false
}

func fmtF(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }
