package smap

import (
	"math"
	"slices"
	"strings"
	"unicode"

	"golang.org/x/text/unicode/norm"
)

// Input is what an analyser sees: the raw item and the project's keywords.
type Input struct {
	Item     RawItem
	Keywords []string
	// Tokens is the item text, NFC-normalised, lowercased and split into
	// words (letters and digits); filled before the first analyser runs.
	Tokens []string
}

// Mention counts the occurrences of one project keyword in an item.
type Mention struct {
	Keyword string `json:"keyword"`
	Count   int    `json:"count"`
}

// Result is the analysis of one item; each analyser fills its part.
type Result struct {
	Language        string    // "vi", "en" or "unknown"
	SentimentLabel  string    // "positive", "negative" or "neutral"
	SentimentScore  float64   // -1 … 1
	Keywords        []string  // project keywords mentioned, in project order
	Mentions        []Mention // per mentioned keyword
	EngagementScore float64   // ≥ 0
}

// Analyzer is one step of the analysis. Analyzers run in order on the same
// Result (the sentiment analyser reads the language), must be
// deterministic and safe for concurrent use. An error or a panic fails the
// item (it goes to smap.analytics.errors and counts as an error).
type Analyzer interface {
	Name() string
	Analyze(in *Input, res *Result) error
}

// Builtins returns the built-in analysers in their required order:
// language, sentiment, mentions, engagement.
func Builtins() []Analyzer {
	return []Analyzer{LanguageAnalyzer{}, SentimentAnalyzer{}, MentionAnalyzer{}, EngagementAnalyzer{}}
}

// tokenize NFC-normalises and lowercases s and splits it into words.
func tokenize(s string) []string {
	s = strings.ToLower(norm.NFC.String(s))
	return strings.FieldsFunc(s, func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) })
}

// LanguageAnalyzer tells Vietnamese from English: letters only Vietnamese
// uses (đ, ơ, ư, ă and tone-marked vowels) and frequent function words of
// each language are scored; the higher score wins when it has at least two
// points, otherwise the language is "unknown".
type LanguageAnalyzer struct{}

// Name implements Analyzer.
func (LanguageAnalyzer) Name() string { return "language" }

var (
	viWords = set("và", "của", "là", "không", "có", "những", "được", "này", "rất", "cho", "với", "các", "một", "mình", "thấy", "bạn", "về", "đây", "quá", "nhưng")
	enWords = set("the", "and", "is", "of", "to", "a", "in", "it", "this", "that", "for", "with", "about", "what", "you", "my", "on", "just", "are", "was")
)

func set(ws ...string) map[string]bool {
	m := make(map[string]bool, len(ws))
	for _, w := range ws {
		m[w] = true
	}
	return m
}

// vietnameseOnly are lowercase letters that occur in Vietnamese and not in
// English text.
const vietnameseOnly = "đăâêôơưàáảãạằắẳẵặầấẩẫậèéẻẽẹềếểễệìíỉĩịòóỏõọồốổỗộờớởỡợùúủũụừứửữựỳýỷỹỵ"

// Analyze implements Analyzer.
func (LanguageAnalyzer) Analyze(in *Input, res *Result) error {
	vi, en := 0, 0
	for _, t := range in.Tokens {
		switch {
		case viWords[t]:
			vi += 2
		case enWords[t]:
			en += 2
		}
		if strings.ContainsAny(t, vietnameseOnly) {
			vi++
		}
	}
	switch {
	case vi >= 2 && vi > en:
		res.Language = "vi"
	case en >= 2 && en > vi:
		res.Language = "en"
	default:
		res.Language = "unknown"
	}
	return nil
}

// SentimentAnalyzer scores sentiment with a lexicon per language
// (Vietnamese and English; unknown languages use both). Lexicon entries of
// two words are matched before single words; a negator up to two words
// before an entry flips it. Score = (positive − negative) / (positive +
// negative); the label is positive above 0.2, negative below −0.2,
// otherwise (and without any hit) neutral.
type SentimentAnalyzer struct{}

// Name implements Analyzer.
func (SentimentAnalyzer) Name() string { return "sentiment" }

type lexicon struct {
	pos, neg, negators map[string]bool
}

var (
	viLexicon = lexicon{
		pos:      set("tốt", "tuyệt", "tuyệt vời", "đẹp", "thích", "hài lòng", "đáng mua", "xuất sắc", "yêu", "ổn", "ngon", "mượt"),
		neg:      set("tệ", "xấu", "thất vọng", "lỗi", "kém", "đắt", "chán", "hỏng", "dở", "tồi", "chậm"),
		negators: set("không", "chẳng", "chưa", "đừng"),
	}
	enLexicon = lexicon{
		pos:      set("good", "great", "excellent", "love", "amazing", "nice", "happy", "recommend", "best", "awesome", "value"),
		neg:      set("bad", "terrible", "awful", "hate", "poor", "disappointed", "broken", "worst", "expensive", "slow", "boring"),
		negators: set("not", "never", "no", "don", "dont", "isn", "isnt", "without"),
	}
)

// Analyze implements Analyzer.
func (SentimentAnalyzer) Analyze(in *Input, res *Result) error {
	var lex []lexicon
	switch res.Language {
	case "vi":
		lex = []lexicon{viLexicon}
	case "en":
		lex = []lexicon{enLexicon}
	default:
		lex = []lexicon{viLexicon, enLexicon}
	}
	pos, neg := 0, 0
	toks := in.Tokens
	negated := func(i int) bool {
		for j := max(0, i-2); j < i; j++ {
			for _, l := range lex {
				if l.negators[toks[j]] {
					return true
				}
			}
		}
		return false
	}
	for i := 0; i < len(toks); i++ {
		polarity, width := 0, 1
		for _, l := range lex {
			if i+1 < len(toks) {
				bi := toks[i] + " " + toks[i+1]
				if l.pos[bi] {
					polarity, width = 1, 2
				} else if l.neg[bi] {
					polarity, width = -1, 2
				}
			}
			if polarity == 0 {
				if l.pos[toks[i]] {
					polarity = 1
				} else if l.neg[toks[i]] {
					polarity = -1
				}
			}
			if polarity != 0 {
				break
			}
		}
		if polarity == 0 {
			continue
		}
		if negated(i) {
			polarity = -polarity
		}
		if polarity > 0 {
			pos++
		} else {
			neg++
		}
		i += width - 1
	}
	res.SentimentScore, res.SentimentLabel = 0, "neutral"
	if pos+neg > 0 {
		res.SentimentScore = math.Round(float64(pos-neg)/float64(pos+neg)*1000) / 1000
	}
	switch {
	case res.SentimentScore > 0.2:
		res.SentimentLabel = "positive"
	case res.SentimentScore < -0.2:
		res.SentimentLabel = "negative"
	}
	return nil
}

// MentionAnalyzer counts whole-word, case-insensitive occurrences of each
// project keyword (a keyword of several words matches that word sequence).
type MentionAnalyzer struct{}

// Name implements Analyzer.
func (MentionAnalyzer) Name() string { return "mentions" }

// Analyze implements Analyzer.
func (MentionAnalyzer) Analyze(in *Input, res *Result) error {
	res.Keywords, res.Mentions = nil, nil
	for _, kw := range in.Keywords {
		kt := tokenize(kw)
		if len(kt) == 0 {
			continue
		}
		n := 0
		for i := 0; i+len(kt) <= len(in.Tokens); i++ {
			if slices.Equal(in.Tokens[i:i+len(kt)], kt) {
				n++
			}
		}
		if n > 0 {
			res.Keywords = append(res.Keywords, kw)
			res.Mentions = append(res.Mentions, Mention{Keyword: kw, Count: n})
		}
	}
	return nil
}

// EngagementAnalyzer scores engagement as ln(1 + likes + 2·comments +
// 3·shares), plus, when views are known, 10 × the interaction rate
// (interactions / views, capped at 1), rounded to 4 decimals.
type EngagementAnalyzer struct{}

// Name implements Analyzer.
func (EngagementAnalyzer) Name() string { return "engagement" }

// Analyze implements Analyzer.
func (EngagementAnalyzer) Analyze(in *Input, res *Result) error {
	it := in.Item
	// In float64: the weighted sum of counts near the int64 limit would
	// overflow in integers and make the score NaN.
	inter := float64(max(it.Likes, 0)) + 2*float64(max(it.Comments, 0)) + 3*float64(max(it.Shares, 0))
	s := math.Log1p(inter)
	if it.Views > 0 {
		s += 10 * min(inter/float64(it.Views), 1)
	}
	res.EngagementScore = math.Round(s*10000) / 10000
	return nil
}
