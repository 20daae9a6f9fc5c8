package silver

import (
	"math/rand/v2"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/sluicehq/sluice/stages"
)

// Record is one generated bronze record and the verdict the silver stage
// must reach on it.
type Record struct {
	Key   string
	Value []byte
	// WantReason is "" for a valid record, else the dead-letter reason
	// (sanity_fail, decode_error or unknown_task_type).
	WantReason stages.Reason
	// WantRule is the failing rule id for sanity_fail, else "".
	WantRule string
}

// CorpusOption configures [NewCorpus] and [GenerateCorpus].
type CorpusOption func(*corpusConfig)

type corpusConfig struct {
	now  time.Time
	keys int
}

// CorpusNow sets the instant the corpus is generated relative to: valid
// trade dates are before its date and valid publisher times before it.
// Default 2025-06-02T03:00:00Z, so valid records stay valid under any later
// clock, and the invalid "future" values are in year 2999 so they stay
// invalid under any realistic clock.
func CorpusNow(t time.Time) CorpusOption {
	return func(c *corpusConfig) { c.now = t }
}

// CorpusKeys sets the number of distinct natural keys per task type (ta:
// (symbol, trade_date) pairs, sa: urls). Fewer keys mean more merges.
// Default for [GenerateCorpus]: n/6 (each key about three times); for
// [NewCorpus]: 10 000.
func CorpusKeys(n int) CorpusOption {
	return func(c *corpusConfig) {
		if n > 0 {
			c.keys = n
		}
	}
}

// GenerateCorpus returns n bronze records, deterministic for a given seed
// and options: half ta.bar, half sa.article; a fraction invalidFraction of
// them (0..1) invalid, spread evenly over the 14 rules, decode errors and
// unknown task types, each failing exactly its WantRule (every earlier rule
// passes). Valid records repeat keys so that merges happen.
func GenerateCorpus(seed int64, n int, invalidFraction float64, opts ...CorpusOption) []Record {
	o := append([]CorpusOption{CorpusKeys(max(1, n/6))}, opts...)
	c := NewCorpus(seed, invalidFraction, o...)
	out := make([]Record, n)
	for i := range out {
		out[i] = c.Next()
	}
	return out
}

// Corpus is a deterministic, unbounded stream of bronze records (see
// [GenerateCorpus]). Not safe for concurrent use.
type Corpus struct {
	rng       *rand.Rand
	invalid   float64
	now       time.Time
	symbols   []string
	dates     []string
	urls      int
	domains   []string
	fragments []string
	fragRunes []int
	buf       []byte
	seq       uint64
}

// NewCorpus returns a record stream for seed.
func NewCorpus(seed int64, invalidFraction float64, opts ...CorpusOption) *Corpus {
	cfg := corpusConfig{now: time.Date(2025, 6, 2, 3, 0, 0, 0, time.UTC), keys: 10000}
	for _, o := range opts {
		o(&cfg)
	}
	c := &Corpus{
		rng:     rand.New(rand.NewPCG(uint64(seed), 0x5111ce)),
		invalid: min(max(invalidFraction, 0), 1),
		now:     cfg.now,
		urls:    cfg.keys,
		domains: []string{"cafef.vn", "vnexpress.net", "vietstock.vn", "ndh.vn", "tinnhanhchungkhoan.vn", "reuters.com"},
		fragments: []string{
			"Thị trường chứng khoán Việt Nam ghi nhận phiên tăng điểm mạnh ",
			"nhờ dòng tiền khối ngoại quay trở lại nhóm ngân hàng. ",
			"Cổ phiếu thép và bất động sản tiếp tục dẫn dắt chỉ số, ",
			"trong khi thanh khoản toàn thị trường vượt mốc hai mươi nghìn tỷ đồng. ",
			"Nhà đầu tư cá nhân vẫn thận trọng trước kỳ công bố kết quả kinh doanh quý. ",
			"Giới phân tích nhận định xu hướng ngắn hạn còn phụ thuộc vào lãi suất điều hành. ",
			"Foreign investors net bought on the Ho Chi Minh City exchange today. ",
			"Ngân hàng Nhà nước giữ nguyên lãi suất, tỷ giá ổn định quanh vùng hiện tại. ",
		},
		buf: make([]byte, 0, 2048),
	}
	for _, f := range c.fragments {
		c.fragRunes = append(c.fragRunes, utf8.RuneCountInString(f))
	}
	// ta key space: symbols × trade dates ≈ keys.
	nsym := min(cfg.keys, 400)
	real := []string{"VNM", "FPT", "HPG", "VCB", "VIC", "MWG", "SSI", "TCB", "MSN", "GAS", "VHM", "ACB", "E1VFVN30"}
	for i := 0; len(c.symbols) < nsym; i++ {
		if i < len(real) {
			if isSymbol(real[i]) {
				c.symbols = append(c.symbols, real[i])
			}
			continue
		}
		c.symbols = append(c.symbols, genSymbol(i))
	}
	ndates := max(1, (cfg.keys+nsym-1)/nsym)
	d := time.Date(cfg.now.Year(), cfg.now.Month(), cfg.now.Day(), 0, 0, 0, 0, time.UTC)
	for len(c.dates) < ndates {
		d = d.AddDate(0, 0, -1)
		if wd := d.Weekday(); wd == time.Saturday || wd == time.Sunday {
			continue
		}
		c.dates = append(c.dates, d.Format(time.DateOnly))
	}
	return c
}

// genSymbol derives a distinct 3–7 letter symbol from i.
func genSymbol(i int) string {
	n := 3 + i%5
	b := make([]byte, n)
	x := uint64(i)*2654435761 + 12345
	for j := range b {
		b[j] = 'A' + byte(x%26)
		x /= 26
		if x == 0 {
			x = uint64(i) + uint64(j)*7 + 1
		}
	}
	// the index suffix keeps symbols distinct
	for j, k := n-1, i; j >= 0 && k > 0; j, k = j-1, k/26 {
		b[j] = 'A' + byte(k%26)
	}
	return string(b)
}

// invalid categories: the 14 rules, then decode errors and unknown task
// types.
const (
	catDecode  = "decode"
	catUnknown = "unknown"
)

// Next returns the next record.
func (c *Corpus) Next() Record {
	c.seq++
	ta := c.rng.IntN(2) == 0
	if c.invalid > 0 && c.rng.Float64() < c.invalid {
		rules := Rules()
		k := c.rng.IntN(len(rules) + 2)
		switch {
		case k < len(rules):
			rule := rules[k]
			if rule[:3] == "ta." {
				return c.ta(rule)
			}
			return c.sa(rule)
		case k == len(rules):
			return c.decodeError()
		default:
			return c.unknownTaskType()
		}
	}
	if ta {
		return c.ta("")
	}
	return c.sa("")
}

func (c *Corpus) finish(key string, reason stages.Reason, rule string) Record {
	v := make([]byte, len(c.buf))
	copy(v, c.buf)
	return Record{Key: key, Value: v, WantReason: reason, WantRule: rule}
}

func appendF(b []byte, f float64) []byte { return strconv.AppendFloat(b, f, 'f', -1, 64) }

// ta builds a ta.bar record failing rule (valid when rule is "").
func (c *Corpus) ta(rule string) Record {
	r := c.rng
	sym := c.symbols[r.IntN(len(c.symbols))]
	date := c.dates[r.IntN(len(c.dates))]
	// a price in VND on the exchange's 50/100 tick grid
	base := float64(10000 + 50*r.IntN(3000))
	step := 50.0
	if base >= 50000 {
		step = 100
	}
	open := base + step*float64(r.IntN(11)-5)
	cl := base + step*float64(r.IntN(11)-5)
	high := max(open, cl) + step*float64(r.IntN(4))
	low := min(open, cl) - step*float64(r.IntN(4))
	vol := strconv.Itoa(100 * (1 + r.IntN(50000)))
	if r.IntN(50) == 0 { // a flat zero-volume day
		open, cl, high, low, vol = base, base, base, base, "0"
	}
	currency := []string{"", `,"currency":"VND"`, `,"currency":""`, `,"currency":null`, `,"currency":"USD"`}[r.IntN(5)]

	symJSON := `"` + sym + `"`
	dateJSON := `"` + date + `"`
	prices := [4]string{}
	for i, f := range [4]float64{open, high, low, cl} {
		prices[i] = string(appendF(nil, f))
	}
	volJSON := vol
	switch rule {
	case RuleTASymbol:
		sym = []string{"vnm", "AB", "ABCDEFGH", "VN1"}[r.IntN(4)]
		symJSON = `"` + sym + `"`
		if r.IntN(5) == 0 {
			symJSON, sym = "123", "123"
		}
	case RuleTATradeDate:
		dateJSON = []string{`"2999-01-02"`, `"2025-02-30"`, `"20250601"`, `20250601`, `null`}[r.IntN(5)]
	case RuleTAPrice:
		switch r.IntN(3) {
		case 0:
			prices[2] = "-" + prices[2]
		case 1:
			prices[3] = "null"
		default:
			prices[0] = `"` + prices[0] + `"`
		}
	case RuleTAPriceRelation:
		prices[1] = string(appendF(nil, max(open, cl)-step)) // high below max(open, close)
	case RuleTAVolume:
		volJSON = []string{"-100", "1.5", `"100"`, "null"}[r.IntN(4)]
	case RuleTAZeroVolume:
		volJSON = "0"
		prices[1] = string(appendF(nil, max(open, cl)+step)) // not flat
	case RuleTACurrency:
		currency = []string{`,"currency":"usd"`, `,"currency":"US"`, `,"currency":840`, `,"currency":"VNDX"`}[r.IntN(4)]
	}
	b := c.buf[:0]
	b = append(b, `{"task_type":"ta.bar","task_id":"`...)
	b = strconv.AppendUint(b, c.seq, 10)
	b = append(b, `","payload":{"symbol":`...)
	b = append(b, symJSON...)
	b = append(b, `,"trade_date":`...)
	b = append(b, dateJSON...)
	for i, name := range [4]string{`,"open":`, `,"high":`, `,"low":`, `,"close":`} {
		b = append(b, name...)
		b = append(b, prices[i]...)
	}
	b = append(b, `,"volume":`...)
	b = append(b, volJSON...)
	b = append(b, currency...)
	if r.IntN(2) == 0 {
		b = append(b, `,"vwap":`...)
		b = appendF(b, (high+low+cl)/3)
	}
	if r.IntN(3) == 0 {
		b = append(b, `,"adj_close":`...)
		b = appendF(b, cl)
	}
	b = append(b, `,"source":"`...)
	b = append(b, []string{"hose", "hnx", "upcom", "ssi-api"}[r.IntN(4)]...)
	b = append(b, `","content_hash":"`...)
	b = strconv.AppendUint(b, r.Uint64(), 16)
	b = append(b, '"')
	if r.IntN(2) == 0 {
		b = append(b, `,"first_seen_time":"`...)
		b = c.now.Add(-time.Duration(r.IntN(7*24*3600))*time.Second).AppendFormat(b, time.RFC3339)
		b = append(b, '"')
	}
	b = append(b, `}}`...)
	c.buf = b
	if rule == "" {
		return c.finish(sym, "", "")
	}
	return c.finish(sym, stages.ReasonSanityFail, rule)
}

// sa builds an sa.article record failing rule (valid when rule is "").
func (c *Corpus) sa(rule string) Record {
	r := c.rng
	id := r.IntN(c.urls)
	dom := c.domains[id%len(c.domains)]
	url := "https://" + dom + "/tin-tuc/bai-viet-" + strconv.Itoa(id) + ".html"
	urlJSON := `"` + url + `"`
	pub := c.now.Add(-time.Duration(r.IntN(30*24*3600)) * time.Second)
	fs := pub.Add(time.Duration(r.IntN(6*3600)-600) * time.Second)
	pubJSON := `"` + pub.In(time.FixedZone("", 7*3600)).Format(time.RFC3339) + `"`
	fsJSON := `"` + fs.Format(time.RFC3339) + `"`
	domJSON := `"` + dom + `"`
	hashJSON := `"` + strconv.FormatUint(r.Uint64(), 16) + `"`
	symbolsJSON := ""
	switch r.IntN(5) {
	case 0: // absent: a macro article
	case 1:
		symbolsJSON = `,"symbols":[]`
	default:
		symbolsJSON = `,"symbols":["` + c.symbols[r.IntN(len(c.symbols))] + `","` + c.symbols[r.IntN(len(c.symbols))] + `"]`
	}
	textRunes := MinTextLength + r.IntN(200)
	textJSON := ""
	switch rule {
	case RuleSAURL:
		urlJSON = []string{`"` + dom + `/no-scheme"`, `"ftp://` + dom + `/x"`, `"https://"`, `""`, `42`}[r.IntN(5)]
		url = urlJSON
		if urlJSON[0] == '"' {
			url = urlJSON[1 : len(urlJSON)-1]
		}
	case RuleSAPublisherTime:
		pubJSON = []string{`"2999-01-01T00:00:00Z"`, `"yesterday"`, `null`, `1717300000`}[r.IntN(4)]
	case RuleSAFirstSeen:
		switch r.IntN(3) {
		case 0:
			fsJSON = `"` + pub.Add(-25*time.Hour).Format(time.RFC3339) + `"`
		case 1:
			fsJSON = `null`
		default:
			fsJSON = `"02/06/2025"`
		}
	case RuleSAText:
		switch r.IntN(3) {
		case 0:
			textRunes = MinTextLength - 1
		case 1:
			textJSON = `null`
		default:
			textJSON = `12345`
		}
	case RuleSAContentHash:
		hashJSON = []string{`""`, `" "`, `null`}[r.IntN(3)]
	case RuleSASymbols:
		symbolsJSON = []string{`,"symbols":["VNM","vnm"]`, `,"symbols":"VNM"`, `,"symbols":["FPT",1]`}[r.IntN(3)]
	case RuleSASourceDomain:
		domJSON = []string{`""`, `null`, `7`}[r.IntN(3)]
	}
	b := c.buf[:0]
	b = append(b, `{"task_type":"sa.article","payload":{"url_canonical":`...)
	b = append(b, urlJSON...)
	b = append(b, `,"source_domain":`...)
	b = append(b, domJSON...)
	b = append(b, `,"publisher_time":`...)
	b = append(b, pubJSON...)
	// A quarter of the records carry first_seen only in the envelope.
	envFirstSeen := rule != RuleSAFirstSeen && r.IntN(4) == 0
	if !envFirstSeen {
		b = append(b, `,"first_seen_time":`...)
		b = append(b, fsJSON...)
	}
	if lang := r.IntN(20); lang < 12 {
		b = append(b, `,"language":"vi"`...)
	} else if lang < 17 {
		b = append(b, `,"language":"en"`...)
	} else if lang < 18 {
		b = append(b, `,"language":"fr"`...)
	}
	if r.IntN(4) != 0 {
		b = append(b, `,"title":"Bản tin thị trường số `...)
		b = strconv.AppendInt(b, int64(id), 10)
		b = append(b, '"')
	}
	b = append(b, `,"text_normalized":`...)
	if textJSON != "" {
		b = append(b, textJSON...)
	} else {
		b = append(b, '"')
		b = c.appendText(b, textRunes)
		b = append(b, '"')
	}
	b = append(b, `,"content_hash":`...)
	b = append(b, hashJSON...)
	b = append(b, symbolsJSON...)
	if r.IntN(3) == 0 {
		b = append(b, `,"author":"Phóng viên `...)
		b = strconv.AppendInt(b, int64(r.IntN(40)), 10)
		b = append(b, '"')
	}
	if r.IntN(3) == 0 {
		b = append(b, `,"topic_tags":["thi-truong","vi-mo"]`...)
	}
	if r.IntN(3) == 0 {
		b = append(b, `,"hype_raw":`...)
		b = appendF(b, float64(r.IntN(10000))/100)
		b = append(b, `,"hype_crowd":`...)
		b = appendF(b, float64(r.IntN(10000))/100)
		b = append(b, `,"hype_elitist":`...)
		b = appendF(b, float64(r.IntN(10000))/100)
		b = append(b, `,"account_weights_applied":`...)
		b = strconv.AppendBool(b, r.IntN(2) == 0)
	}
	b = append(b, '}')
	if envFirstSeen {
		b = append(b, `,"first_seen":`...)
		b = append(b, fsJSON...)
	}
	b = append(b, '}')
	c.buf = b
	if rule == "" {
		return c.finish(url, "", "")
	}
	return c.finish(url, stages.ReasonSanityFail, rule)
}

// appendText appends exactly n code points of Vietnamese text (no JSON
// escaping needed).
func (c *Corpus) appendText(b []byte, n int) []byte {
	for n > 0 {
		i := c.rng.IntN(len(c.fragments))
		f := c.fragments[i]
		if c.fragRunes[i] <= n {
			b = append(b, f...)
			n -= c.fragRunes[i]
			continue
		}
		for _, ch := range f {
			if n == 0 {
				break
			}
			b = utf8.AppendRune(b, ch)
			n--
		}
	}
	return b
}

func (c *Corpus) decodeError() Record {
	r := c.rng
	sym := c.symbols[r.IntN(len(c.symbols))]
	variants := []string{
		`{"task_type":"ta.bar","payload":{"symbol":"` + sym + `","trade_date":"2025-05-30"`, // truncated
		`{"task_type":"ta.bar","payload":"` + sym + `"}`,
		`["ta.bar"]`,
		`{"task_type":"sa.article"}`,
		`{"task_type":"ta.bar","payload":{"symbol":"` + sym + `"},"first_seen":"not a time"}`,
		`not json at all`,
	}
	c.buf = append(c.buf[:0], variants[r.IntN(len(variants))]...)
	return c.finish(sym, stages.ReasonDecodeError, "")
}

func (c *Corpus) unknownTaskType() Record {
	r := c.rng
	sym := c.symbols[r.IntN(len(c.symbols))]
	tt := []string{`"task_type":"ta.tick",`, `"task_type":5,`, ``, `"task_type":"",`}[r.IntN(4)]
	c.buf = append(c.buf[:0], `{`+tt+`"payload":{"symbol":"`+sym+`"}}`...)
	return c.finish(sym, stages.ReasonUnknownTaskType, "")
}
