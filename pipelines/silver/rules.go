package silver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

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
// immutable after construction and safe for concurrent use.
type Validator struct {
	now func() time.Time
	loc *time.Location
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
	row, err := v.Transform(m.Value, m.Source.Timestamp)
	if err != nil {
		return nil, err
	}
	return []Row{row}, nil
}

// Transform validates env and maps it to its row. recordTime is the Kafka
// record timestamp (zero when unknown), used only as a fallback for
// ta first_seen_time. Errors are classified with [stages.DeadLetter].
func (v *Validator) Transform(env Envelope, recordTime time.Time) (Row, error) {
	obj := env.fields
	if obj == nil {
		var err error
		if obj, _, err = scanObject(env.Payload, ""); err != nil {
			return Row{}, stages.DeadLetter(stages.ReasonDecodeError, "", fmt.Errorf("payload: %w", err))
		}
	}
	p := payload(obj)
	switch env.TaskType {
	case TaskTA:
		r, err := v.transformTA(p, env, recordTime)
		if err != nil {
			return Row{}, err
		}
		return Row{TA: r}, nil
	case TaskSA:
		r, err := v.transformSA(p, env)
		if err != nil {
			return Row{}, err
		}
		return Row{SA: r}, nil
	}
	return Row{}, stages.DeadLetter(stages.ReasonUnknownTaskType, "", fmt.Errorf("unknown task_type %q", env.TaskType))
}

func fail(rule string, err error) error {
	return stages.DeadLetter(stages.ReasonSanityFail, rule, err)
}

func failf(rule, format string, args ...any) error {
	return fail(rule, fmt.Errorf(format, args...))
}

func decodeFail(err error) error {
	return stages.DeadLetter(stages.ReasonDecodeError, "", fmt.Errorf("payload: %w", err))
}

func (v *Validator) transformTA(p payload, env Envelope, recordTime time.Time) (*TARow, error) {
	r := &TARow{}

	// ta.symbol
	sym, err := p.requiredString("symbol")
	if err != nil {
		return nil, fail(RuleTASymbol, err)
	}
	if !isSymbol(sym) {
		return nil, failf(RuleTASymbol, "symbol %q does not match ^[A-Z]{3,7}$", sym)
	}
	r.Symbol = sym

	// ta.trade_date
	ds, err := p.requiredString("trade_date")
	if err != nil {
		return nil, fail(RuleTATradeDate, err)
	}
	d, err := time.Parse(time.DateOnly, ds)
	if err != nil {
		return nil, failf(RuleTATradeDate, "trade_date %q is not a valid YYYY-MM-DD date", ds)
	}
	ny, nm, nd := v.now().In(v.loc).Date()
	today := time.Date(ny, nm, nd, 0, 0, 0, 0, time.UTC)
	if d.After(today) {
		return nil, failf(RuleTATradeDate, "trade_date %s is after today (%s in %s)", ds, today.Format(time.DateOnly), v.loc)
	}
	r.TradeDate = d

	// ta.price
	prices := [4]float64{}
	for i, name := range [4]string{"open", "high", "low", "close"} {
		raw, err := p.requiredNumber(name)
		if err != nil {
			return nil, fail(RuleTAPrice, err)
		}
		f, err := parseFloat(raw)
		if err != nil {
			return nil, failf(RuleTAPrice, "%s %s: %v", name, raw, err)
		}
		if f < 0 {
			return nil, failf(RuleTAPrice, "%s %s is negative", name, raw)
		}
		prices[i] = f
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
	vraw, err := p.requiredNumber("volume")
	if err != nil {
		return nil, fail(RuleTAVolume, err)
	}
	vol, err := parseInteger(vraw)
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
	cur, ok, err := p.optionalString("currency")
	if err != nil {
		return nil, fail(RuleTACurrency, err)
	}
	switch {
	case !ok || cur == "":
		r.Currency = DefaultCurrency
	case isCurrency(cur):
		r.Currency = cur
	default:
		return nil, failf(RuleTACurrency, "currency %q does not match ^[A-Z]{3}$", cur)
	}

	// Fields without a rule: type checks only.
	if r.VWAP, err = p.optionalFloat("vwap"); err != nil {
		return nil, decodeFail(err)
	}
	if r.AdjClose, err = p.optionalFloat("adj_close"); err != nil {
		return nil, decodeFail(err)
	}
	pm, err := p.optionalFloat("price_multiplier")
	if err != nil {
		return nil, decodeFail(err)
	}
	r.PriceMultiplier = 1.0
	if pm != nil {
		r.PriceMultiplier = *pm
	}
	if r.Source, err = p.optionalStringPtr("source"); err != nil {
		return nil, decodeFail(err)
	}
	if r.ContentHash, err = p.optionalStringPtr("content_hash"); err != nil {
		return nil, decodeFail(err)
	}
	fs, ok, err := p.optionalTime("first_seen_time")
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
	return r, nil
}

func (v *Validator) transformSA(p payload, env Envelope) (*SARow, error) {
	r := &SARow{}

	// sa.url
	u, err := p.requiredString("url_canonical")
	if err != nil {
		return nil, fail(RuleSAURL, err)
	}
	if err := checkURL(u); err != nil {
		return nil, fail(RuleSAURL, err)
	}
	r.URLCanonical = u

	// sa.publisher_time
	now := v.now()
	pub, ok, err := p.optionalTime("publisher_time")
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
	fs, ok, err := p.optionalTime("first_seen_time")
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
	text, err := p.requiredString("text_normalized")
	if err != nil {
		return nil, fail(RuleSAText, err)
	}
	if n := utf8.RuneCountInString(text); n < MinTextLength {
		return nil, failf(RuleSAText, "text_normalized has %d characters, want at least %d", n, MinTextLength)
	}
	r.TextNormalized = &text

	// sa.content_hash
	hash, err := p.requiredString("content_hash")
	if err != nil {
		return nil, fail(RuleSAContentHash, err)
	}
	if strings.TrimSpace(hash) == "" {
		return nil, failf(RuleSAContentHash, "content_hash is empty")
	}
	r.ContentHash = hash

	// sa.symbols
	syms, ok, err := p.optionalStrings("symbols")
	if err != nil {
		return nil, fail(RuleSASymbols, err)
	}
	if ok {
		for i, s := range syms {
			if !isSymbol(s) {
				return nil, failf(RuleSASymbols, "symbols[%d] %q does not match ^[A-Z]{3,7}$", i, s)
			}
		}
		r.Symbols = syms
	}

	// sa.source_domain
	dom, err := p.requiredString("source_domain")
	if err != nil {
		return nil, fail(RuleSASourceDomain, err)
	}
	if strings.TrimSpace(dom) == "" {
		return nil, failf(RuleSASourceDomain, "source_domain is empty")
	}
	r.SourceDomain = dom

	// language: normalised, never a failure.
	lang := LanguageUnknown
	if raw, ok := lookup(p, "language"); ok && kindOf(raw) == kindString {
		if s, err := decodeString(raw); err == nil && (s == "vi" || s == "en") {
			lang = s
		}
	}
	r.Language = &lang

	// Fields without a rule: type checks only.
	if r.Title, err = p.optionalStringPtr("title"); err != nil {
		return nil, decodeFail(err)
	}
	if r.Author, err = p.optionalStringPtr("author"); err != nil {
		return nil, decodeFail(err)
	}
	tags, ok, err := p.optionalStrings("topic_tags")
	if err != nil {
		return nil, decodeFail(err)
	}
	if ok {
		r.TopicTags = tags
	}
	if r.HypeRaw, err = p.optionalFloat("hype_raw"); err != nil {
		return nil, decodeFail(err)
	}
	if r.HypeCrowd, err = p.optionalFloat("hype_crowd"); err != nil {
		return nil, decodeFail(err)
	}
	if r.HypeElitist, err = p.optionalFloat("hype_elitist"); err != nil {
		return nil, decodeFail(err)
	}
	if r.AccountWeightsApplied, err = p.optionalBool("account_weights_applied"); err != nil {
		return nil, decodeFail(err)
	}
	return r, nil
}

// isSymbol reports whether s matches ^[A-Z]{3,7}$.
func isSymbol(s string) bool {
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
func isCurrency(s string) bool {
	return len(s) == 3 && isSymbol(s)
}

// checkURL accepts an absolute http or https URL with a host.
func checkURL(s string) error {
	if strings.TrimSpace(s) == "" {
		return errors.New("url_canonical is empty")
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

func fmtF(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

// parseFloat parses a JSON number as float64; values beyond float64's range
// are an error (DOUBLE PRECISION could not store them).
func parseFloat(raw string) (float64, error) {
	f, err := strconv.ParseFloat(raw, 64)
	if err != nil {
		if errors.Is(err, strconv.ErrRange) && !math.IsInf(f, 0) {
			// Underflow to a denormal or zero is a representable value.
			return f, nil
		}
		if errors.Is(err, strconv.ErrRange) {
			return 0, errors.New("out of range for DOUBLE PRECISION")
		}
		return 0, fmt.Errorf("not a number: %w", err)
	}
	return f, nil
}

var (
	errNotInteger = errors.New("not an integer")
	errIntRange   = errors.New("out of range for BIGINT")
)

// parseInteger parses a JSON number whose value is an integer that fits an
// int64, whatever its spelling: "1000", "1e3", "1000.0" and "1.0e3" are all
// 1000; "1.5" and "1e-1" are not integers. Exponents are handled without
// materialising huge numbers.
func parseInteger(raw string) (int64, error) {
	s := raw
	neg := false
	if strings.HasPrefix(s, "-") {
		neg = true
		s = s[1:]
	}
	mant, exp := s, ""
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		mant, exp = s[:i], s[i+1:]
	}
	intPart, frac := mant, ""
	if i := strings.IndexByte(mant, '.'); i >= 0 {
		intPart, frac = mant[:i], mant[i+1:]
	}
	digits := strings.TrimLeft(intPart+frac, "0")
	// value = digits × 10^scale
	scale := -len(frac)
	if exp != "" {
		e, err := strconv.Atoi(exp)
		if err != nil {
			// An exponent beyond int range: zero stays zero, anything else
			// is either a non-integer (huge negative) or out of range.
			if digits == "" {
				return 0, nil
			}
			if strings.HasPrefix(exp, "-") {
				return 0, errNotInteger
			}
			return 0, errIntRange
		}
		scale += e
	}
	if digits == "" {
		return 0, nil
	}
	trimmed := strings.TrimRight(digits, "0")
	scale += len(digits) - len(trimmed)
	digits = trimmed
	if scale < 0 {
		return 0, errNotInteger
	}
	if len(digits)+scale > 19 {
		return 0, errIntRange
	}
	str := digits + strings.Repeat("0", scale)
	if neg {
		str = "-" + str
	}
	n, err := strconv.ParseInt(str, 10, 64)
	if err != nil {
		return 0, errIntRange
	}
	return n, nil
}

// payload gives typed access to the fields of a payload object. JSON null
// is treated as absent.
type payload []member

func typeErr(name, want string, raw []byte) error {
	return fmt.Errorf("%s: want %s, got %s", name, want, describe(raw))
}

func (p payload) requiredString(name string) (string, error) {
	s, ok, err := p.optionalString(name)
	if err != nil {
		return "", err
	}
	if !ok {
		return "", fmt.Errorf("%s missing", name)
	}
	return s, nil
}

func (p payload) optionalString(name string) (string, bool, error) {
	raw, ok := present(p, name)
	if !ok {
		return "", false, nil
	}
	if kindOf(raw) != kindString {
		return "", false, typeErr(name, "a string", raw)
	}
	s, err := decodeString(raw)
	if err != nil {
		return "", false, fmt.Errorf("%s: %w", name, err)
	}
	return s, true, nil
}

func (p payload) optionalStringPtr(name string) (*string, error) {
	s, ok, err := p.optionalString(name)
	if err != nil || !ok {
		return nil, err
	}
	return &s, nil
}

func (p payload) requiredNumber(name string) (string, error) {
	raw, ok := present(p, name)
	if !ok {
		return "", fmt.Errorf("%s missing", name)
	}
	if kindOf(raw) != kindNumber {
		return "", typeErr(name, "a number", raw)
	}
	return string(raw), nil
}

func (p payload) optionalFloat(name string) (*float64, error) {
	raw, ok := present(p, name)
	if !ok {
		return nil, nil
	}
	if kindOf(raw) != kindNumber {
		return nil, typeErr(name, "a number", raw)
	}
	f, err := parseFloat(string(raw))
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", name, raw, err)
	}
	return &f, nil
}

func (p payload) optionalBool(name string) (*bool, error) {
	raw, ok := present(p, name)
	if !ok {
		return nil, nil
	}
	if kindOf(raw) != kindBool {
		return nil, typeErr(name, "a boolean", raw)
	}
	b := raw[0] == 't'
	return &b, nil
}

func (p payload) optionalTime(name string) (time.Time, bool, error) {
	raw, ok := present(p, name)
	if !ok {
		return time.Time{}, false, nil
	}
	t, err := parseTimeField(raw)
	if err != nil {
		return time.Time{}, false, fmt.Errorf("%s: %w", name, err)
	}
	return t, true, nil
}

// optionalStrings decodes an array of strings; an element of another type
// is an error naming its index.
func (p payload) optionalStrings(name string) ([]string, bool, error) {
	raw, ok := present(p, name)
	if !ok {
		return nil, false, nil
	}
	if kindOf(raw) != kindArray {
		return nil, false, typeErr(name, "an array of strings", raw)
	}
	var elems []json.RawMessage
	if err := json.Unmarshal(raw, &elems); err != nil {
		return nil, false, fmt.Errorf("%s: %w", name, err)
	}
	out := make([]string, len(elems))
	for i, e := range elems {
		if kindOf(e) != kindString {
			return nil, false, typeErr(fmt.Sprintf("%s[%d]", name, i), "a string", e)
		}
		s, err := decodeString(e)
		if err != nil {
			return nil, false, fmt.Errorf("%s[%d]: %w", name, i, err)
		}
		out[i] = s
	}
	return out, true, nil
}
